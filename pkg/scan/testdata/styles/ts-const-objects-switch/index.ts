// Written for effectfence's scanner tests: typed Tool constants listed in ListTools and run
// from a switch in CallTool, through a client class that posts with axios.
import axios from "axios";
import { Tool } from "@modelcontextprotocol/sdk/types.js";

const getPositionsTool: Tool = {
  name: "get_positions",
  description: "Open positions",
  inputSchema: { type: "object" },
};

const submitTradeTool: Tool = {
  name: "submit_trade",
  description: "Buy or sell a stock",
  inputSchema: { type: "object", required: ["symbol", "qty"] },
};

class BrokerClient {
  async getPositions() {
    return (await axios.get(`${BASE}/v2/positions`)).data;
  }

  async submitTrade(order: Order) {
    return (await axios.post(`${BASE}/v2/orders`, order)).data;
  }
}

server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: [getPositionsTool, submitTradeTool] }));

server.setRequestHandler(CallToolRequestSchema, async (request) => {
  const client = new BrokerClient();
  switch (request.params.name) {
    case "get_positions": {
      return { content: [{ type: "text", text: JSON.stringify(await client.getPositions()) }] };
    }
    case "submit_trade": {
      return { content: [{ type: "text", text: JSON.stringify(await client.submitTrade(request.params.arguments)) }] };
    }
    default:
      throw new Error("Unknown tool");
  }
});
