// Cancels serve's calls through the real MCP TypeScript SDK client (an AbortSignal, which the
// SDK turns into notifications/cancelled naming its own request id) and prints one JSON report;
// the Go test (serve_sdk_cancel_test.go) judges it.
//
//   PEERS=.peers EF_BIN=/path/to/effectfence EF_LEDGER=/tmp/x.db node serve_cancel.mjs
//
// serve runs with --workers 1: a prepare waiting on a held intent takes the wait lane's one
// slot, and a second waiting prepare queues behind it.
const { PEERS, EF_BIN, EF_LEDGER } = process.env;
if (!PEERS || !EF_BIN || !EF_LEDGER) {
  console.error('serve_cancel.mjs: set PEERS, EF_BIN and EF_LEDGER');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);

const transport = new StdioClientTransport({
  command: EF_BIN,
  args: ['serve', '--workers', '1', '--ledger', EF_LEDGER],
  env: { ...process.env },
  stderr: 'inherit',
});
const client = new Client({ name: 'effectfence-cancel-e2e', version: '1.0.0' });
await client.connect(transport);

async function call(name, args, options) {
  try {
    const res = await client.callTool({ name, arguments: args }, undefined, options);
    const text = res.content?.[0]?.text ?? '';
    let json = null;
    try { json = JSON.parse(text); } catch { json = { unparsed: text }; }
    return { isError: !!res.isError, json };
  } catch (e) {
    return { rpcError: { code: e.code, message: String(e.message) } };
  }
}

const report = {};
report.held = await call('fence_prepare', { intent: 'pay:held', tool: 't' });

// The waiter takes the wait lane's slot (pay:held is held); the queued prepare waits behind it.
const running = new AbortController();
const queued = new AbortController();
const waiter = call('fence_prepare', { intent: 'pay:held', tool: 't', wait_secs: 60 }, { signal: running.signal, timeout: 120000 });
const behind = call('fence_prepare', { intent: 'pay:queued', tool: 't', wait_secs: 60 }, { signal: queued.signal, timeout: 120000 });
// Both requests are written before the cancellations (the SDK writes in call order).
await new Promise((r) => setTimeout(r, 200));
queued.abort('the agent gave up on it');  // cancelled while queued: it must not be admitted
running.abort('the agent gave up on it'); // cancelled while it waits: its slot must come free
report.waiter = await waiter;
report.behind = await behind;

// Queued behind both on the wait lane: answered once the cancelled waiter has let go of the
// slot (within its 60 s otherwise, past this call's 20 s timeout), and after the queued call
// was handled, so the statuses below see what it did.
report.sync = await call('fence_prepare', { intent: 'pay:sync', tool: 't', wait_secs: 1 }, { timeout: 20000 });
report.queuedStatus = await call('fence_status', { intent: 'pay:queued' });
report.heldStatus = await call('fence_status', { intent: 'pay:held' });
report.commit = await call('fence_commit', { ticket: report.held.json.ticket, result: { ok: true } });
await client.close();
process.stdout.write(JSON.stringify(report) + '\n');
