// A real MCP server on the TypeScript SDK's Server that checks each call's arguments against
// the tool's input schema as listed, with the SDK's own JSON Schema validator (ajv, as the
// SDK's client checks structured results), and refuses a call that does not pass. Its
// schemas carry keywords spelled otherwise beside the real ones, which JSON Schema (and so
// ajv) does not read: pay_capped's key is at most 40 characters ("MaxLength": 100 after
// "maxLength": 40), pay_open's is any string ("Pattern" is no keyword). Each run appends one
// line to the file EFFECTS. For TestKeySchemaIsReadAsJSONSchemaReadsIt.
//
//   PEERS=.peers EFFECTS=/tmp/effects node schema_server.mjs
import { appendFileSync } from 'node:fs';

const { PEERS, EFFECTS } = process.env;
if (!PEERS || !EFFECTS) {
  console.error('schema_server.mjs: set PEERS and EFFECTS');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Server } = await import(`${sdk}/server/index.js`);
const { StdioServerTransport } = await import(`${sdk}/server/stdio.js`);
const { ListToolsRequestSchema, CallToolRequestSchema } = await import(`${sdk}/types.js`);
const { AjvJsonSchemaValidator } = await import(`${sdk}/validation/ajv-provider.js`);

const keyed = (key) => ({ type: 'object', properties: { amount: { type: 'number' }, idempotency_key: key }, required: ['amount'] });
const tools = [
  { name: 'pay_capped', description: 'Pays amount; a key of at most 40 characters.', inputSchema: keyed({ type: 'string', maxLength: 40, MaxLength: 100 }) },
  { name: 'pay_open', description: 'Pays amount; any key.', inputSchema: keyed({ type: 'string', Pattern: '^never$' }) },
];
const validator = new AjvJsonSchemaValidator();
const checks = Object.fromEntries(tools.map((t) => [t.name, validator.getValidator(t.inputSchema)]));

const server = new Server({ name: 'schema-node', version: '1.0.0' }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  const { name, arguments: args = {} } = req.params;
  const v = checks[name]?.(args);
  if (!v?.valid) {
    return { content: [{ type: 'text', text: `Input validation error: ${v?.errorMessage ?? 'no such tool'}` }], isError: true };
  }
  appendFileSync(EFFECTS, `${name} amount=${args.amount} key=${args.idempotency_key ?? ''}\n`);
  return { content: [{ type: 'text', text: `${name} ${args.amount} paid` }] };
});
await server.connect(new StdioServerTransport());
