// Makes one task-augmented call through `effectfence wrap WRAP_ARGS...` as the real MCP
// TypeScript SDK client makes one (callToolStream: the task's handle, tasks/get until it is
// terminal, then tasks/result), and prints one JSON report of what the SDK handed its agent on
// the way: the statuses it saw and the result or the error. TestSDKTaskFollowsTheFlight judges
// it; the script asserts nothing itself.
//
//   PEERS=.peers EF_BIN=/path/to/effectfence WRAP_ARGS='["--wait","1s","--","cmd"]' \
//     TOOL=name TOOL_ARGS='{"a":1}' node follow_client.mjs
const { PEERS, EF_BIN, WRAP_ARGS, TOOL, TOOL_ARGS } = process.env;
if (!PEERS || !EF_BIN || !WRAP_ARGS || !TOOL || !TOOL_ARGS) {
  console.error('follow_client.mjs: set PEERS, EF_BIN, WRAP_ARGS, TOOL and TOOL_ARGS');
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
const client = new Client({ name: 'effectfence-follow', version: '1.0.0' }, { capabilities: { tasks: {} } });
await client.connect(transport);
await client.listTools();

const report = { statuses: [], taskId: null, text: null, replayed: false, error: null };
try {
  const params = { name: TOOL, arguments: JSON.parse(TOOL_ARGS) };
  for await (const m of client.experimental.tasks.callToolStream(params, CallToolResultSchema, { task: { ttl: 300000 }, timeout: 600000 })) {
    if (m.type === 'taskCreated') {
      report.taskId = m.task.taskId;
      report.statuses.push(m.task.status);
    } else if (m.type === 'taskStatus') {
      report.statuses.push(m.task.status);
    } else if (m.type === 'error') {
      throw m.error;
    } else if (m.type === 'result') {
      report.text = m.result.content?.map((c) => c.text ?? c.type).join('\n') ?? '';
      report.replayed = m.result._meta?.['effectfence/replayed'] === true;
    }
  }
} catch (e) {
  report.error = String(e.message ?? e);
}
await client.close();
console.log(JSON.stringify(report));
