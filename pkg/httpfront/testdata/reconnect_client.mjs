// Holds one session through a gateway with the real MCP TypeScript SDK client
// (StreamableHTTPClientTransport), declaring roots, and answers every roots/list the server
// sends on its GET stream. It prints "session ID" once connected, "roots asked" for each
// roots/list it answers, and "error: ..." for each error the transport reports (a stream cut,
// a reconnection refused). It runs until its stdin closes. The Go test
// (TestReconnectedGETStreamTakesOver) cuts its connections and judges what it prints.
//
//   PEERS=.peers URL=http://127.0.0.1:P/mcp node reconnect_client.mjs
const { PEERS, URL: url } = process.env;
if (!PEERS || !url) {
  console.error('reconnect_client.mjs: set PEERS and URL');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdk}/client/streamableHttp.js`);
const types = await import(`${sdk}/types.js`);

const client = new Client({ name: 'reconnect', version: '1.0.0' }, { capabilities: { roots: {} } });
client.setRequestHandler(types.ListRootsRequestSchema, async () => {
  console.log('roots asked');
  return { roots: [{ uri: 'file:///tmp/effectfence-reconnected', name: 'reconnected' }] };
});
client.onerror = (e) => console.log(`error: ${String(e?.message ?? e).replace(/\s+/g, ' ')}`);
const transport = new StreamableHTTPClientTransport(new URL(url));
await client.connect(transport);
console.log(`session ${transport.sessionId}`);
process.stdin.resume();
process.stdin.on('end', async () => {
  await client.close();
  process.exit(0);
});
