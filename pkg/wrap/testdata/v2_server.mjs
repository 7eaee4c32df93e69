// A real MCP server on the TypeScript SDK 2 (@modelcontextprotocol/server, serveStdio): it
// serves a client of MCP 2026-07-28 (server/discover, _meta on every request) and one that
// sends initialize (2025-11-25 and earlier) alike. Its tool pay appends one line to the file
// EFFECTS each time it runs.
//
//   PEERS=.peers EFFECTS=/tmp/effects node v2_server.mjs
import { appendFileSync } from 'node:fs';

const { PEERS, EFFECTS } = process.env;
if (!PEERS || !EFFECTS) {
  console.error('v2_server.mjs: set PEERS and EFFECTS');
  process.exit(2);
}
const mods = `${PEERS}/node_modules`;
const { McpServer } = await import(`${mods}/@modelcontextprotocol/server/dist/index.mjs`);
const { serveStdio } = await import(`${mods}/@modelcontextprotocol/server/dist/stdio.mjs`);
const z = await import(`${mods}/zod/v4/index.js`);

serveStdio(() => {
  const server = new McpServer({ name: 'v2-node', version: '1.0.0' }, { capabilities: { tools: {} } });
  server.registerTool('pay', { description: 'pays amount', inputSchema: z.object({ amount: z.number() }) },
    async ({ amount }) => {
      appendFileSync(EFFECTS, `paid ${amount}\n`);
      return { content: [{ type: 'text', text: `paid ${amount}` }] };
    });
  return server;
});
