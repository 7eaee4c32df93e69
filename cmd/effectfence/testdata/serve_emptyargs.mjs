// Drives `effectfence serve` through the real MCP TypeScript SDK client with fence_prepare's
// args left out, sent as null and sent as {}: for every pair of forms, a first attempt in one
// and its retries in the other (while it is in flight, waiting for it with wait_secs, after
// its commit), then fence_status with the retry's form as proof. Prints one JSON report; the
// Go test (serve_emptyargs_unix_test.go) judges it.
//
//   PEERS=.peers EF_BIN=/path/to/effectfence EF_LEDGER=/tmp/x.db node serve_emptyargs.mjs
const { PEERS, EF_BIN, EF_LEDGER } = process.env;
if (!PEERS || !EF_BIN || !EF_LEDGER) {
  console.error('serve_emptyargs.mjs: set PEERS, EF_BIN and EF_LEDGER');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);

const transport = new StdioClientTransport({
  command: EF_BIN,
  args: ['serve', '--ledger', EF_LEDGER],
  env: { ...process.env },
  stderr: 'inherit',
});
const client = new Client({ name: 'effectfence-emptyargs', version: '1.0.0' });
await client.connect(transport);

// call returns {isError, json, same}, as serve_client.mjs's does.
async function call(name, args) {
  try {
    const res = await client.callTool({ name, arguments: args }, undefined, { timeout: 90000 });
    const text = res.content?.[0]?.text ?? '';
    let json = null;
    try { json = JSON.parse(text); } catch { json = { unparsed: text }; }
    const same = JSON.stringify(json) === JSON.stringify(res.structuredContent);
    return { isError: !!res.isError, json, same };
  } catch (e) {
    return { rpcError: { code: e.code, message: String(e.message) } };
  }
}

// argsIn puts a form of the args into a call's arguments: left out, null or {}.
const forms = ['absent', 'null', 'empty'];
function argsIn(form, fields) {
  if (form === 'null') return { ...fields, args: null };
  if (form === 'empty') return { ...fields, args: {} };
  return fields;
}

const cases = [];
for (const first of forms) {
  for (const retry of forms) {
    const intent = `ping:${first}-then-${retry}`;
    const base = { intent, tool: 'ping', agent: 'agent-e2e' };
    const c = { first, retry };
    c.prepared = await call('fence_prepare', argsIn(first, base));
    c.inFlight = await call('fence_prepare', argsIn(retry, base));
    // A waiter in the other form: answered once the first attempt commits (or, if it asks
    // after the commit, at once), with the cert either way.
    const waiting = call('fence_prepare', argsIn(retry, { ...base, wait_secs: 60 }));
    c.commit = await call('fence_commit', { ticket: c.prepared.json?.ticket, result: { pong: intent } });
    c.waited = await waiting;
    c.duplicate = await call('fence_prepare', argsIn(retry, base));
    c.status = await call('fence_status', argsIn(retry, { intent, tool: 'ping' }));
    c.differs = await call('fence_prepare', { ...base, args: { n: null } });
    cases.push(c);
  }
}
await client.close();

process.stdout.write(JSON.stringify({ cases }) + '\n');
