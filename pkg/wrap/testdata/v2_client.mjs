// A real MCP client on the TypeScript SDK 2 (@modelcontextprotocol/client). MODE "auto" lets
// it negotiate: it sends server/discover (MCP 2026-07-28) first and falls back to initialize
// (2025-11-25) when the server shows it speaks no 2026-07-28; MODE "modern" makes it a client
// of 2026-07-28 only. It connects over stdio to the command STDIO_ARGV (a JSON array), or over
// Streamable HTTP to URL, calls pay with {"amount": 5} CALLS times, and prints one JSON
// report: the revision it negotiated and the answers, or the error connect gave, as the SDK
// hands it to its caller.
//
//   PEERS=.peers MODE=auto STDIO_ARGV='["effectfence","wrap","--","node","v2_server.mjs"]' CALLS=2 node v2_client.mjs
const { PEERS, MODE, STDIO_ARGV, URL: URL_, CALLS } = process.env;
if (!PEERS || !MODE || (!STDIO_ARGV && !URL_)) {
  console.error('v2_client.mjs: set PEERS, MODE and STDIO_ARGV or URL');
  process.exit(2);
}
const mods = `${PEERS}/node_modules`;
const { Client, StreamableHTTPClientTransport } = await import(`${mods}/@modelcontextprotocol/client/dist/index.mjs`);
const { StdioClientTransport } = await import(`${mods}/@modelcontextprotocol/client/dist/stdio.mjs`);

const options = { versionNegotiation: { mode: 'auto' } };
if (MODE === 'modern') options.supportedProtocolVersions = ['2026-07-28'];
const client = new Client({ name: 'v2-client', version: '1.0.0' }, options);
let transport;
if (STDIO_ARGV) {
  const [command, ...args] = JSON.parse(STDIO_ARGV);
  transport = new StdioClientTransport({ command, args, env: process.env, stderr: 'inherit' });
} else {
  transport = new StreamableHTTPClientTransport(new URL(URL_));
}
const report = {};
try {
  await client.connect(transport);
  report.version = client.getNegotiatedProtocolVersion();
  report.answers = [];
  for (let i = 0; i < Number(CALLS ?? 1); i++) {
    const res = await client.callTool({ name: 'pay', arguments: { amount: 5 } });
    report.answers.push({
      text: res.content?.find((c) => c.type === 'text')?.text ?? '',
      replayed: res._meta?.['effectfence/replayed'] === true,
    });
  }
} catch (e) {
  report.error = { name: e?.constructor?.name ?? '', code: e?.code, message: String(e?.message ?? e), data: e?.data };
} finally {
  await client.close().catch(() => {});
}
console.log(JSON.stringify(report));
