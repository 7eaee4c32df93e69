// Starts `effectfence wrap -- <demo server>` the way an MCP client does, through the real MCP
// TypeScript SDK's stdio transport with no env of its own (the SDK then hands the server its
// default environment: HOME, LOGNAME, PATH, SHELL, TERM, USER) and the working directory /
// (Claude Desktop's), calls charge_card, closes, and does it all again ROUNDS times. Prints one
// JSON line per round; the Go test (TestRelaunchedByAnMCPClientKeepsReceipts) judges them.
//
//   PEERS=.peers EF_BIN=/path/to/effectfence EF_EFFECTS=/tmp/effects ROUNDS=2 node relaunch_client.mjs
const { PEERS, EF_BIN, EF_EFFECTS, ROUNDS } = process.env;
if (!PEERS || !EF_BIN || !EF_EFFECTS || !ROUNDS) {
  console.error('relaunch_client.mjs: set PEERS, EF_BIN, EF_EFFECTS and ROUNDS');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);

for (let round = 1; round <= Number(ROUNDS); round++) {
  const transport = new StdioClientTransport({
    command: EF_BIN,
    args: ['wrap', '--', EF_BIN, 'demo-server', '--latency', '0s', '--effects', EF_EFFECTS],
    cwd: '/',
    stderr: 'inherit',
  });
  const client = new Client({ name: 'effectfence-relaunch', version: '1.0.0' });
  await client.connect(transport);
  const res = await client.callTool({ name: 'charge_card', arguments: { amount: 4900 } });
  console.log(JSON.stringify({
    round,
    isError: !!res.isError,
    replayed: res._meta?.['effectfence/replayed'] === true,
    text: res.content?.[0]?.text ?? '',
  }));
  await client.close();
}
