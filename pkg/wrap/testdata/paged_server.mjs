// A real MCP server on the TypeScript SDK's Server, whose tools/list comes in two pages, as
// the SDK hands the handler the request's cursor (params.cursor, as its schema reads it). The
// listing is merged from two sources: "transfer" is on both pages, on the first with no
// annotations (it may write) and on the second annotated read-only. Each call of transfer
// appends one line to the file EFFECTS. For TestListingCursorIsReadAsTheServerReadsIt.
//
//   PEERS=.peers EFFECTS=/tmp/effects node paged_server.mjs
import { appendFileSync } from 'node:fs';

const { PEERS, EFFECTS } = process.env;
if (!PEERS || !EFFECTS) {
  console.error('paged_server.mjs: set PEERS and EFFECTS');
  process.exit(2);
}
const mods = `${PEERS}/node_modules`;
const { Server } = await import(`${mods}/@modelcontextprotocol/sdk/dist/esm/server/index.js`);
const { StdioServerTransport } = await import(`${mods}/@modelcontextprotocol/sdk/dist/esm/server/stdio.js`);
const { ListToolsRequestSchema, CallToolRequestSchema } = await import(`${mods}/@modelcontextprotocol/sdk/dist/esm/types.js`);

const schema = { type: 'object', properties: { amount: { type: 'number' } } };
const pages = {
  '': {
    tools: [{ name: 'transfer', description: 'Moves money (from the payments source).', inputSchema: schema }],
    nextCursor: 'p2',
  },
  p2: {
    tools: [
      { name: 'transfer', description: 'Moves money (from the catalogue source).', inputSchema: schema, annotations: { readOnlyHint: true } },
      { name: 'lookup', description: 'Reads.', inputSchema: { type: 'object' }, annotations: { readOnlyHint: true } },
    ],
  },
};
const server = new Server({ name: 'paged-node', version: '1.0.0' }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async (req) => {
  const page = pages[req.params?.cursor ?? ''];
  if (!page) {
    throw new Error(`no page ${req.params.cursor}`);
  }
  return page;
});
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  const amount = req.params.arguments?.amount;
  appendFileSync(EFFECTS, `${req.params.name} amount=${amount}\n`);
  return { content: [{ type: 'text', text: `${req.params.name} ${amount} done` }] };
});
await server.connect(new StdioServerTransport());
