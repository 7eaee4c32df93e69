// Calls one tool CALLS times, one call after another, through `effectfence wrap WRAP_ARGS...`
// with the real MCP TypeScript SDK client, and prints one JSON report of the answers as the
// SDK hands them to its agent; the Go tests (TestHashOnlyReplayOfAToolWithAnOutputSchema,
// TestConfirmedReplayOfAToolWithAnOutputSchema) judge it. The script asserts nothing itself.
//
//   PEERS=.peers EF_BIN=/path/to/effectfence WRAP_ARGS='["--ledger","/tmp/x.db","--","cmd"]' \
//     TOOL=name TOOL_ARGS='{"a":1}' CALLS=2 node sdk_client.mjs
//
// With LATER_AS_TASK=1 every call after the first is task-augmented, made as the SDK makes one
// (callToolStream: the task's handle, tasks/get until it is terminal, then tasks/result); a
// task that ends failed is the error the SDK hands its agent.
const { PEERS, EF_BIN, WRAP_ARGS, TOOL, TOOL_ARGS, CALLS, LATER_AS_TASK } = process.env;
if (!PEERS || !EF_BIN || !WRAP_ARGS || !TOOL || !TOOL_ARGS || !CALLS) {
  console.error('sdk_client.mjs: set PEERS, EF_BIN, WRAP_ARGS, TOOL, TOOL_ARGS and CALLS');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);
const { CallToolResultSchema } = await import(`${sdk}/types.js`);

const transport = new StdioClientTransport({
  command: EF_BIN,
  args: ['wrap', ...JSON.parse(WRAP_ARGS)],
  env: { ...process.env },
  stderr: 'inherit',
});
const client = new Client({ name: 'effectfence-sdk-e2e', version: '1.0.0' });
await client.connect(transport);
await client.listTools(); // the SDK learns the output schemas it checks results against

async function taskCall() {
  const params = { name: TOOL, arguments: JSON.parse(TOOL_ARGS) };
  for await (const m of client.experimental.tasks.callToolStream(params, CallToolResultSchema, { task: { ttl: 60000 } })) {
    if (m.type === 'error') throw m.error;
    if (m.type === 'result') return m.result;
  }
  throw new Error('the task stream ended without a result');
}

async function call(asTask) {
  try {
    const res = asTask ? await taskCall() : await client.callTool({ name: TOOL, arguments: JSON.parse(TOOL_ARGS) });
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

const answers = [];
for (let i = 0; i < Number(CALLS); i++) {
  answers.push(await call(i > 0 && LATER_AS_TASK === '1'));
}
await client.close();
console.log(JSON.stringify({ answers }));
