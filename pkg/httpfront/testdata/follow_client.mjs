// One agent of a gateway (`effectfence wrap --listen`), as the real MCP TypeScript SDK client
// is one over Streamable HTTP: it makes one task-augmented call (callToolStream: the task's
// handle, tasks/get until it is terminal, then tasks/result) and prints one JSON report of what
// the SDK handed it on the way. The Go tests (gwfollow_e2e_test.go) judge it; the script
// asserts nothing itself. On stderr it says what the test waits on, a line each:
//   session <id>             the session is open
//   asked                    the server asked a question (elicitation/create); it is answered
//                            once a line arrives on stdin
//   task <status> <taskId>   the SDK saw the task so
// ROLE=first answers questions (when told); ROLE=follow follows its task to the end;
// ROLE=delete ends its session (DELETE) and ROLE=close drops its connections without a DELETE,
// once its task is working.
//
//   PEERS=.peers URL=http://127.0.0.1:P/mcp TOKEN=... ROLE=first TOOL=name TOOL_ARGS='{}' node follow_client.mjs
const { PEERS, URL: url, TOKEN, ROLE, TOOL, TOOL_ARGS } = process.env;
if (!PEERS || !url || !TOKEN || !ROLE || !TOOL || !TOOL_ARGS) {
  console.error('follow_client.mjs: set PEERS, URL, TOKEN, ROLE, TOOL and TOOL_ARGS');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdk}/client/streamableHttp.js`);
const { CallToolResultSchema, ElicitRequestSchema } = await import(`${sdk}/types.js`);

const say = (line) => process.stderr.write(`${line}\n`);
let release;
const answered = new Promise((r) => { release = r; });
process.stdin.on('data', () => release());
process.stdin.on('end', () => release());

const transport = new StreamableHTTPClientTransport(new globalThis.URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${TOKEN}` } },
});
const client = new Client({ name: `effectfence-follow-${ROLE}`, version: '1.0.0' }, { capabilities: { tasks: {}, elicitation: {} } });
client.setRequestHandler(ElicitRequestSchema, async () => {
  say('asked');
  await answered;
  return { action: 'accept', content: { interpretation: 'technical' } };
});
await client.connect(transport);
say(`session ${transport.sessionId}`);

const report = { session: transport.sessionId, statuses: [], taskId: null, text: null, replayed: false, error: null };
try {
  const params = { name: TOOL, arguments: JSON.parse(TOOL_ARGS) };
  for await (const m of client.experimental.tasks.callToolStream(params, CallToolResultSchema, { task: { ttl: 300000 }, timeout: 600000 })) {
    if (m.type === 'taskCreated' || m.type === 'taskStatus') {
      report.taskId = m.task.taskId;
      report.statuses.push(m.task.status);
      report.statusMessage = m.task.statusMessage ?? null;
      say(`task ${m.task.status} ${m.task.taskId}`);
      if (m.task.status === 'working' && (ROLE === 'delete' || ROLE === 'close')) {
        break;
      }
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
if (ROLE === 'delete') {
  await transport.terminateSession();
}
await client.close();
console.log(JSON.stringify(report));
process.exit(0);
