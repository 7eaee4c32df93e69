// Calls get-structured-content of mcp-server-everything (a tool with an output schema) twice
// through `effectfence wrap --keep-result get-structured-content=hash` with the real MCP
// TypeScript SDK client, and prints one JSON report of both answers; the Go test
// (TestHashOnlyReplayOfAToolWithAnOutputSchema) judges it. The script asserts nothing itself.
//
//   PEERS=.peers EF_BIN=/path/to/effectfence EF_LEDGER=/tmp/x.db node hashonly_client.mjs
const { PEERS, EF_BIN, EF_LEDGER } = process.env;
if (!PEERS || !EF_BIN || !EF_LEDGER) {
  console.error('hashonly_client.mjs: set PEERS, EF_BIN and EF_LEDGER');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);
const server = `${PEERS}/node_modules/.bin/mcp-server-everything`;
const tool = 'get-structured-content';

const transport = new StdioClientTransport({
  command: EF_BIN,
  args: ['wrap', '--ledger', EF_LEDGER, '--fence', tool, '--keep-result', `${tool}=hash`, '--', server],
  env: { ...process.env },
  stderr: 'inherit',
});
const client = new Client({ name: 'effectfence-hashonly-e2e', version: '1.0.0' });
await client.connect(transport);
await client.listTools(); // the SDK learns the output schema it checks results against

async function call() {
  try {
    const res = await client.callTool({ name: tool, arguments: { location: 'New York' } });
    return {
      isError: !!res.isError,
      text: res.content?.map((c) => c.text ?? c.type).join('\n') ?? '',
      structured: res.structuredContent ?? null,
      replayed: res._meta?.['effectfence/replayed'] === true,
      notKept: res._meta?.['effectfence/result_not_kept'] === true,
    };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
}

const report = { first: await call(), second: await call() };
await client.close();
console.log(JSON.stringify(report));
