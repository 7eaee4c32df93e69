// Calls tools through a gateway with the real MCP TypeScript SDK client
// (StreamableHTTPClientTransport), one after another, and prints one JSON line per step:
// {"session":ID} once connected, then {"i":N,"text":...} or {"i":N,"error":...} per call.
// With SID set it joins that session as a restarted client does (the SDK then skips
// initialize, and its request ids start at 0 again). The Go test
// (TestRestartedSDKClientReusesIDs) kills it or lets it end.
//
//   PEERS=.peers URL=http://127.0.0.1:P/mcp [SID=...] CALLS='[{"name":...,"arguments":{...}}]' node reuse_client.mjs
const { PEERS, URL: url, SID, CALLS } = process.env;
if (!PEERS || !url || !CALLS) {
  console.error('reuse_client.mjs: set PEERS, URL and CALLS');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdk}/client/streamableHttp.js`);

const client = new Client({ name: 'reuse', version: '1.0.0' });
client.onerror = () => {}; // each call's own error is printed with it
const transport = new StreamableHTTPClientTransport(new URL(url), SID ? { sessionId: SID } : {});
await client.connect(transport);
console.log(JSON.stringify({ session: transport.sessionId }));
const calls = JSON.parse(CALLS);
for (const [i, c] of calls.entries()) {
  try {
    const r = await client.callTool(c, undefined, { timeout: 120000 });
    console.log(JSON.stringify({ i, text: r.content?.[0]?.text ?? '' }));
  } catch (e) {
    console.log(JSON.stringify({ i, error: String(e?.message ?? e) }));
  }
}
process.exit(0);
