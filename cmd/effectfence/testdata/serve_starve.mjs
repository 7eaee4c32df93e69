// Issue 11 item 5 through the real MCP TypeScript SDK client: one holder and 32 prepares that
// wait for it (wait_secs) on `effectfence serve --lease-secs 2`; then the holder's heartbeat and
// commit. Prints one JSON report; the Go test (serve_lanes_e2e_test.go) judges it.
//
//   PEERS=.peers EF_BIN=/path/to/effectfence EF_LEDGER=/tmp/x.db node serve_starve.mjs
const { PEERS, EF_BIN, EF_LEDGER } = process.env;
if (!PEERS || !EF_BIN || !EF_LEDGER) {
  console.error('serve_starve.mjs: set PEERS, EF_BIN and EF_LEDGER');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);

const transport = new StdioClientTransport({
  command: EF_BIN,
  args: ['serve', '--ledger', EF_LEDGER, '--lease-secs', '2'],
  env: { ...process.env },
  stderr: 'inherit',
});
const client = new Client({ name: 'effectfence-starve', version: '1.0.0' });
await client.connect(transport);

async function call(name, args) {
  try {
    const res = await client.callTool({ name, arguments: args }, undefined, { timeout: 120000 });
    return { isError: !!res.isError, json: res.structuredContent ?? null };
  } catch (e) {
    return { rpcError: { code: e.code, message: String(e.message) } };
  }
}

const args = { intent: 'charge:order-starve', tool: 'charge_card', args: { amount: 4900 } };
const report = {};
report.first = await call('fence_prepare', args);
const waiting = Array.from({ length: 32 }, () => call('fence_prepare', { ...args, wait_secs: 30 }));
// The waiters' requests are on the wire before the holder's; give the server a moment to
// start them, the order in which the bug starved the holder.
await new Promise((r) => setTimeout(r, 500));
report.heartbeat = await call('fence_heartbeat', { ticket: report.first.json?.ticket });
report.commit = await call('fence_commit', { ticket: report.first.json?.ticket, result: { charge_id: 'ch_starve' } });
report.waiters = await Promise.all(waiting);
await client.close();
process.stdout.write(JSON.stringify(report));
