// A real MCP server on the TypeScript SDK (Streamable HTTP, one session) whose event store
// feeds a resumed stream: it names each event's stream, so the SDK files a resumption of the
// session's GET stream under that stream again and refuses a second one (409). The tool
// "start" sends the session a log message "tick N" every 300 ms, unrelated to any request:
// on the session's GET stream, stored for replay also while none is open.
//
//   PEERS=.peers node fed_server.mjs    (prints the port it listens on)
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';

const { PEERS } = process.env;
if (!PEERS) {
  console.error('fed_server.mjs: set PEERS');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { McpServer } = await import(`${sdk}/server/mcp.js`);
const { StreamableHTTPServerTransport } = await import(`${sdk}/server/streamableHttp.js`);

class StreamStore {
  events = [];
  n = 0;
  async storeEvent(streamId, message) {
    const id = `${streamId}|${++this.n}`;
    this.events.push({ id, streamId, message });
    return id;
  }
  async getStreamIdForEventId(id) {
    return this.events.find((e) => e.id === id)?.streamId;
  }
  async replayEventsAfter(lastEventId, { send }) {
    const i = this.events.findIndex((e) => e.id === lastEventId);
    if (i < 0) throw new Error(`unknown event ${lastEventId}`);
    const streamId = this.events[i].streamId;
    for (const e of this.events.slice(i + 1)) {
      if (e.streamId === streamId) await send(e.id, e.message);
    }
    return streamId;
  }
}

const server = new McpServer({ name: 'fed', version: '1.0.0' }, { capabilities: { logging: {} } });
let ticks = 0;
let timer;
server.registerTool('start', { description: 'Sends a log message every 300 ms.' }, async () => {
  timer ??= setInterval(() => {
    server.server.notification({ method: 'notifications/message', params: { level: 'info', data: `tick ${++ticks}` } }).catch(() => {});
  }, 300);
  return { content: [{ type: 'text', text: 'started' }] };
});
server.registerTool('stop', { description: 'Stops the log messages.' }, async () => {
  clearInterval(timer);
  return { content: [{ type: 'text', text: `stopped after ${ticks}` }] };
});
const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: () => randomUUID(), eventStore: new StreamStore() });
await server.connect(transport);
const http = createServer((req, res) => {
  transport.handleRequest(req, res).catch((err) => {
    console.error(err);
    if (!res.headersSent) res.writeHead(500).end();
  });
});
http.listen(0, '127.0.0.1', () => console.log(http.address().port));
