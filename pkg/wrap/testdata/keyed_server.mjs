// A real MCP server on the TypeScript SDK (McpServer, zod). For TestInjectedKeyMeetsTheSchema,
// its pay_* tools take an optional idempotency key the SDK checks against the tool's schema
// before the tool runs (a key of at most 45 characters, as Square's API has, or a UUID). For
// TestConfirmedReplayOfAToolWithAnOutputSchema, pay_structured has an output schema and waits
// until the file until exists, if one is given. Each run appends one line to the file EFFECTS.
//
//   PEERS=.peers EFFECTS=/tmp/effects node keyed_server.mjs
import { appendFileSync, existsSync } from 'node:fs';

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
server.registerTool('pay_structured', {
  description: 'Pays amount, once the file until exists; answers with structured content.',
  inputSchema: { amount: z.number(), until: z.string().optional() },
  outputSchema: { paid: z.number() },
}, async ({ amount, until }) => {
  while (until && !existsSync(until)) {
    await new Promise((r) => setTimeout(r, 10));
  }
  appendFileSync(EFFECTS, `pay_structured amount=${amount}\n`);
  return { content: [{ type: 'text', text: `paid ${amount}` }], structuredContent: { paid: amount } };
});
await server.connect(new StdioServerTransport());
