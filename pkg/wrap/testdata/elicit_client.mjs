// Drives `effectfence wrap` through the real MCP TypeScript SDK client declaring elicitation:
// for each answer, a call of the test server's `slow` tool is made unknown by killing the
// server (SIGKILL) mid-call, then retried; the client answers wrap's elicitation/create as
// told. A second client without elicitation does the same. It prints one JSON report; the Go
// test (TestElicitationWithRealSDKClient) judges it and the ledger. It asserts nothing itself.
//
//   PEERS=.peers EF_BIN=… EF_LEDGER=… CHILD='["/path/to/server", "arg"]' node elicit_client.mjs
import { execFileSync } from 'node:child_process';

const { PEERS, EF_BIN, EF_LEDGER, CHILD } = process.env;
if (!PEERS || !EF_BIN || !EF_LEDGER || !CHILD) {
  console.error('elicit_client.mjs: set PEERS, EF_BIN, EF_LEDGER and CHILD');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);
const { ElicitRequestSchema } = await import(`${sdk}/types.js`);

async function connect(name, elicit) {
  const args = ['wrap', '--ledger', EF_LEDGER, '--redact', 'slow:tag', '--', ...JSON.parse(CHILD)];
  const transport = new StdioClientTransport({ command: EF_BIN, args, env: { ...process.env }, stderr: 'pipe' });
  let log = '';
  transport.stderr.on('data', (d) => { log += d; process.stderr.write(d); });
  const client = new Client({ name, version: '2.5.0' }, { capabilities: elicit ? { elicitation: {} } : {} });
  const c = { client, transport, asked: [], answer: null, log: () => log };
  if (elicit) {
    client.setRequestHandler(ElicitRequestSchema, async (req) => {
      c.asked.push(req.params);
      return c.answer;
    });
  }
  await client.connect(transport);
  return c;
}

function summary(res) {
  return {
    isError: !!res.isError,
    text: res.content?.map((x) => x.text ?? x.type).join('\n') ?? '',
    code: res._meta?.['effectfence/code'] ?? null,
    replayed: res._meta?.['effectfence/replayed'] === true,
    cert: res._meta?.['effectfence/cert'] ?? null,
    intent: res._meta?.['effectfence/intent'] ?? null,
  };
}

async function call(c, tag) {
  try {
    return summary(await c.client.callTool({ name: 'slow', arguments: { ms: 1500, tag } }, undefined, { timeout: 60000 }));
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
}

// killMidCall starts the call, waits until the server says it started, and kills the server.
async function killMidCall(c, tag) {
  const before = c.log().length;
  const pending = call(c, tag);
  for (let i = 0; i < 3000 && !c.log().slice(before).includes(`slow tag=${tag} started`); i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  const kids = execFileSync('pgrep', ['-P', String(c.transport.pid)]).toString().trim().split('\n');
  for (const pid of kids) process.kill(Number(pid), 'SIGKILL');
  return pending;
}

const answers = {
  happened: { action: 'accept', content: { outcome: 'happened', reference: 'ch_42' } },
  did_not_happen: { action: 'accept', content: { outcome: 'did_not_happen' } },
  leave_fenced: { action: 'accept', content: { outcome: 'leave_fenced' } },
  decline: { action: 'decline' },
  cancel: { action: 'cancel' },
};
const report = { scenarios: {} };
const a = await connect('effectfence-elicit-e2e', true);
for (const [name, answer] of Object.entries(answers)) {
  const tag = `s3cret-${name}`;
  const first = await killMidCall(a, tag);
  a.answer = answer;
  const askedBefore = a.asked.length;
  // Two duplicates at once: one question, and (did_not_happen) one run.
  const [retry, twin] = await Promise.all([call(a, tag), call(a, tag)]);
  const again = await call(a, tag); // the state the answer left
  report.scenarios[name] = { first, retry, twin, again, asked: a.asked.slice(askedBefore) };
}
await a.client.close();

const b = await connect('no-elicitation-client', false);
const tag = 's3cret-plain';
report.plain = { first: await killMidCall(b, tag), retry: await call(b, tag) };
await b.client.close();
console.log(JSON.stringify(report));
