// A real MCP server on the TypeScript SDK (McpServer, zod), for TestInjectedKeyMeetsTheSchema:
// its tools take an optional idempotency key the SDK checks against the tool's schema before
// the tool runs (a key of at most 45 characters, as Square's API has, or a UUID). Each run
// appends one line to the file EFFECTS.
//
//   PEERS=.peers EFFECTS=/tmp/effects node keyed_server.mjs
import { appendFileSync } from 'node:fs';

const { PEERS, EFFECTS } = process.env;
if (!PEERS || !EFFECTS) {
  console.error('keyed_server.mjs: set PEERS and EFFECTS');
  process.exit(2);
}
const mods = `${PEERS}/node_modules`;
const { McpServer } = await import(`${mods}/@modelcontextprotocol/sdk/dist/esm/server/mcp.js`);
const { StdioServerTransport } = await import(`${mods}/@modelcontextprotocol/sdk/dist/esm/server/stdio.js`);
const { z } = await import(`${mods}/zod/index.js`);

const server = new McpServer({ name: 'keyed-node', version: '1.0.0' });
const run = (tool) => async ({ amount, idempotency_key: key }) => {
  appendFileSync(EFFECTS, `${tool} amount=${amount} key=${key ?? ''}\n`);
  return { content: [{ type: 'text', text: `${tool} ${amount} key=${key ?? 'none'}` }] };
};
server.registerTool('pay_short_key', {
  description: 'Pays amount; an idempotency key of at most 45 characters.',
  inputSchema: { amount: z.number(), idempotency_key: z.string().max(45).optional() },
}, run('pay_short_key'));
server.registerTool('pay_uuid_key', {
  description: 'Pays amount; an idempotency key that is a UUID.',
  inputSchema: { amount: z.number(), idempotency_key: z.string().uuid().optional() },
}, run('pay_uuid_key'));
server.registerTool('pay_any_key', {
  description: 'Pays amount; any idempotency key.',
  inputSchema: { amount: z.number(), idempotency_key: z.string().optional() },
}, run('pay_any_key'));
await server.connect(new StdioServerTransport());
