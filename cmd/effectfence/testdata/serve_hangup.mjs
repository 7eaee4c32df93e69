// A real MCP client (the TypeScript SDK) that hangs up mid-call: it prepares N intents, sends
// their N commits and closes its transport without waiting for a single answer (the SDK ends
// serve's stdin, then sends SIGTERM after 2 s and SIGKILL after 4 s). A second client, on a new
// serve process over the same ledger, then prepares each intent again. Prints one JSON report;
// the Go test (serve_adversary_unix_test.go) judges it.
//
//   PEERS=.peers EF_BIN=/path/to/effectfence EF_LEDGER=/tmp/x.db node serve_hangup.mjs
const { PEERS, EF_BIN, EF_LEDGER } = process.env;
if (!PEERS || !EF_BIN || !EF_LEDGER) {
  console.error('serve_hangup.mjs: set PEERS, EF_BIN and EF_LEDGER');
  process.exit(2);
}
const N = 8;
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);

async function connect() {
  const transport = new StdioClientTransport({
    command: EF_BIN,
    args: ['serve', '--ledger', EF_LEDGER],
    env: { ...process.env },
    stderr: 'inherit',
  });
  const client = new Client({ name: 'effectfence-hangup', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

function parse(res) {
  try { return { isError: !!res.isError, json: JSON.parse(res.content?.[0]?.text ?? '') }; }
  catch (e) { return { unparsed: String(e) }; }
}

const report = { commits: [], after: [], exit: null };
const a = await connect();
const tickets = [];
for (let i = 0; i < N; i++) {
  const p = parse(await a.client.callTool({ name: 'fence_prepare', arguments: { intent: `hangup:${i}`, tool: 'charge_card', args: { amount: 100 + i } } }));
  tickets.push(p.json?.ticket ?? null);
}
// Every commit is on serve's stdin before the hang-up: counted as the transport sends them.
let sent = 0;
let allSent;
const everySent = new Promise(resolve => { allSent = resolve; });
const send = a.transport.send.bind(a.transport);
a.transport.send = async (msg) => {
  await send(msg);
  if (msg.method === 'tools/call' && ++sent === N) allSent();
};
const proc = a.transport._process;
const exited = new Promise(resolve => proc.once('exit', (code, signal) => resolve({ code, signal })));
const pending = [];
for (let i = 0; i < N; i++) {
  pending.push(a.client.callTool({ name: 'fence_commit', arguments: { ticket: tickets[i], result: { charge: `ch_${i}` } } })
    .then(r => ({ answered: parse(r) }), e => ({ dropped: String(e.message) })));
}
await everySent;
await a.client.close();
report.commits = await Promise.all(pending);
report.exit = await exited;

const b = await connect();
for (let i = 0; i < N; i++) {
  report.after.push(parse(await b.client.callTool({ name: 'fence_prepare', arguments: { intent: `hangup:${i}`, tool: 'charge_card', args: { amount: 100 + i } } })));
}
await b.client.close();
console.log(JSON.stringify(report));
