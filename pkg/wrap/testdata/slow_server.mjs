// A real MCP server on the TypeScript SDK, for TestKill9WhileNpxNodeRunsTheCall: its one tool,
// slow, waits until the file `until` exists, then records one effect (a line appended to the
// file EFFECTS) and answers. Run under npx, as users run node servers, so that the node that
// runs the call is a grandchild of wrap.
//
//   PEERS=.peers EFFECTS=/tmp/effects npx --no-install -- node slow_server.mjs
import { appendFileSync, existsSync } from 'node:fs';

const { PEERS, EFFECTS } = process.env;
if (!PEERS || !EFFECTS) {
  console.error('slow_server.mjs: set PEERS and EFFECTS');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Server } = await import(`${sdk}/server/index.js`);
const { StdioServerTransport } = await import(`${sdk}/server/stdio.js`);
const { ListToolsRequestSchema, CallToolRequestSchema } = await import(`${sdk}/types.js`);

const server = new Server({ name: 'slow-node', version: '1.0.0' }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: [{
    name: 'slow',
    description: 'Waits until the file until exists, then records one effect.',
    inputSchema: { type: 'object', properties: { until: { type: 'string' }, tag: { type: 'string' } } },
  }],
}));
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  const { until, tag } = req.params.arguments ?? {};
  console.error(`slow_server.mjs: ${tag} started in pid ${process.pid}`);
  while (until && !existsSync(until)) {
    await new Promise((r) => setTimeout(r, 10));
  }
  appendFileSync(EFFECTS, `slow tag=${tag} pid=${process.pid}\n`);
  return { content: [{ type: 'text', text: `done ${tag}` }] };
});
await server.connect(new StdioServerTransport());
