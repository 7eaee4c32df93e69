// Drives `effectfence serve` through the real MCP TypeScript SDK client and prints one JSON
// report of what it observed; the Go test (serve_e2e_test.go) judges the report.
//
//   PEERS=.peers EF_BIN=/path/to/effectfence EF_LEDGER=/tmp/x.db node serve_client.mjs
//
// The script asserts nothing itself, so a server that misbehaves shows up in the report
// instead of as a crash of the client.
const { PEERS, EF_BIN, EF_LEDGER } = process.env;
if (!PEERS || !EF_BIN || !EF_LEDGER) {
  console.error('serve_client.mjs: set PEERS, EF_BIN and EF_LEDGER');
  process.exit(2);
}
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
  const client = new Client({ name: 'effectfence-e2e', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

// call returns {isError, json, same}: the JSON of the text block, and whether
// structuredContent carries the same value.
async function call(client, name, args) {
  try {
    const res = await client.callTool({ name, arguments: args });
    const text = res.content?.[0]?.text ?? '';
    let json = null;
    try { json = JSON.parse(text); } catch { json = { unparsed: text }; }
    const same = JSON.stringify(json) === JSON.stringify(res.structuredContent);
    return { isError: !!res.isError, json, same };
  } catch (e) {
    return { rpcError: { code: e.code, message: String(e.message) } };
  }
}

const charge = (intent) => ({ intent, tool: 'charge_card', args: { amount: 4900, currency: 'usd' }, agent: 'agent-e2e' });
const report = {};

let client = await connect();
report.server = client.getServerVersion();
report.instructions = client.getInstructions();
report.tools = (await client.listTools()).tools;

// prepare -> commit -> duplicate prepare replays the same cert
report.first = await call(client, 'fence_prepare', charge('charge:order-123'));
report.commit = await call(client, 'fence_commit', { ticket: report.first.json.ticket, result: { charge_id: 'ch_1', amount: 4900 } });
report.duplicate = await call(client, 'fence_prepare', charge('charge:order-123'));

// 16 concurrent prepares of one intent
report.concurrent = await Promise.all(
  Array.from({ length: 16 }, () => call(client, 'fence_prepare', charge('payout:vendor-7'))),
);

// abort fences
report.abortPrepare = await call(client, 'fence_prepare', charge('scale:web'));
report.abort = await call(client, 'fence_abort', { ticket: report.abortPrepare.json.ticket, reason: 'timeout: outcome unknown' });
report.afterAbort = await call(client, 'fence_prepare', charge('scale:web'));

// release frees
report.releasePrepare = await call(client, 'fence_prepare', charge('refund:9'));
report.release = await call(client, 'fence_release', { ticket: report.releasePrepare.json.ticket, reason: 'declined before charging' });
report.afterRelease = await call(client, 'fence_prepare', charge('refund:9'));

// heartbeat extends the lease of the ticket that holds refund:9
const held = report.afterRelease.json.ticket;
report.heartbeat = await call(client, 'fence_heartbeat', { ticket: held });

// forged tickets: an edited nonce, an edited token
report.forgedNonce = await call(client, 'fence_commit', { ticket: { ...held, nonce: '0'.repeat(32) }, result: 'forged' });
report.forgedToken = await call(client, 'fence_commit', { ticket: { ...held, token: held.token + 1000 }, result: 'forged' });
report.statusAfterForged = await call(client, 'fence_status', { intent: 'refund:9' });

// bad input through the real client
report.unknownTool = await call(client, 'fence_clear', { intent: 'scale:web', reason: 'let me in' });
report.emptyIntent = await call(client, 'fence_prepare', { intent: '', tool: 'charge_card' });
report.wrongType = await call(client, 'fence_prepare', { intent: 'x', tool: 'charge_card', args: 'amount=1' });

report.statsBefore = await call(client, 'fence_stats', {});
await client.close();

// a new server process on the same ledger still replays the duplicate
client = await connect();
report.afterRestart = await call(client, 'fence_prepare', charge('charge:order-123'));
report.abortedAfterRestart = await call(client, 'fence_prepare', charge('scale:web'));
report.statsAfter = await call(client, 'fence_stats', {});
await client.close();

// two server processes on one ledger (each MCP client starts its own): 8 racers on each
const [a, b] = await Promise.all([connect(), connect()]);
report.twoServers = await Promise.all(
  Array.from({ length: 16 }, (_, i) => call(i % 2 ? a : b, 'fence_prepare', charge('transfer:acct-42'))),
);
await Promise.all([a.close(), b.close()]);

process.stdout.write(JSON.stringify(report) + '\n');
