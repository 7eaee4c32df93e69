// Drives `effectfence wrap -- mcp-server-everything` through the real MCP TypeScript SDK
// client, next to a direct connection to the same server, and prints one JSON report; the Go
// test (TestRealSDKClientThroughWrap) judges it. The script asserts nothing itself.
//
//   PEERS=.peers EF_BIN=/path/to/effectfence EF_LEDGER=/tmp/x.db node wrap_client.mjs
const { PEERS, EF_BIN, EF_LEDGER } = process.env;
if (!PEERS || !EF_BIN || !EF_LEDGER) {
  console.error('wrap_client.mjs: set PEERS, EF_BIN and EF_LEDGER');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);
const server = `${PEERS}/node_modules/.bin/mcp-server-everything`;

async function connect(command, args) {
  const transport = new StdioClientTransport({ command, args, env: { ...process.env }, stderr: 'inherit' });
  const client = new Client({ name: 'effectfence-wrap-e2e', version: '1.0.0' });
  await client.connect(transport);
  // What arrives on the wire, in order, before the SDK handles it: the SDK hands a progress
  // notification to its handler a microtask later but a result at once, so when the last
  // progress and the result come in one read it drops that progress as late. The order on the
  // wire is what wrap controls.
  const handle = transport.onmessage;
  transport.onmessage = (message, extra) => {
    client.wire?.push(message);
    handle?.(message, extra);
  };
  return client;
}

async function call(client, name, args, opts) {
  try {
    const res = await client.callTool({ name, arguments: args }, undefined, opts);
    return {
      isError: !!res.isError,
      // wrap's replay note (marked in its _meta) is not part of the tool's answer.
      text: res.content?.filter((c) => !c._meta?.['effectfence/note']).map((c) => c.text ?? c.type).join('\n') ?? '',
      structured: res.structuredContent ?? null,
      replayed: res._meta?.['effectfence/replayed'] === true,
    };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
}

const report = {};
const direct = await connect(server, []);
const wrapped = await connect(EF_BIN, ['wrap', '--ledger', EF_LEDGER, '--fence-reads', '--', server]);
report.toolsEqual = JSON.stringify(await direct.listTools()) === JSON.stringify(await wrapped.listTools());
report.echo = await Promise.all([1, 2, 3, 4].map(() => call(wrapped, 'echo', { message: 'once' })));
// A tool with an outputSchema: the SDK validates structuredContent of the replay too.
report.structured = [
  await call(wrapped, 'get-structured-content', { location: 'New York' }),
  await call(wrapped, 'get-structured-content', { location: 'New York' }),
];
let progress = 0;
wrapped.wire = [];
report.longRun = await call(wrapped, 'trigger-long-running-operation', { duration: 1, steps: 2 }, {
  onprogress: () => { progress++; },
});
report.progress = progress; // what the SDK's onprogress saw (see connect)
const answered = wrapped.wire.findIndex((m) => m.id !== undefined && ('result' in m || 'error' in m));
report.progressOnWire = wrapped.wire.filter((m) => m.method === 'notifications/progress').length;
report.progressBeforeResult = wrapped.wire.slice(0, answered < 0 ? 0 : answered).filter((m) => m.method === 'notifications/progress').length;
wrapped.wire = undefined;
report.resources = JSON.stringify(await direct.listResources()) === JSON.stringify(await wrapped.listResources());
report.prompts = JSON.stringify(await direct.listPrompts()) === JSON.stringify(await wrapped.listPrompts());
await direct.close();
await wrapped.close();
console.log(JSON.stringify(report));
