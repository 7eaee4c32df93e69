import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { searchPost } from "./client.js";

const server = new McpServer({ name: "shop", version: "1.0.0" });
const BASE = process.env.SHOP_URL ?? "http://localhost:8080";

function deriveIdempotencyKey(args: unknown): string {
  return JSON.stringify(args);
}

server.tool("create_order", "Place an order", { sku: z.string() }, async ({ sku }) => {
  const key = deriveIdempotencyKey({ sku });
  const res = await fetch(`${BASE}/orders`, {
    method: "POST",
    headers: { "Idempotency-Key": key },
    body: JSON.stringify({ sku }),
  });
  return { content: [{ type: "text", text: await res.text() }] };
});

server.tool("list_orders", "List the orders placed so far", {}, async () => {
  const found = await searchPost("/orders/search", {});
  return { content: [{ type: "text", text: JSON.stringify(found) }] };
});

server.registerTool(
  "get_quote",
  { description: "Quote a price and settle it", inputSchema: { amount: z.number() } },
  async ({ amount }) => {
    const charge = await stripe.charges.create({ amount, currency: "usd" });
    return { content: [{ type: "text", text: charge.id }] };
  },
);

server.tool("inventory", "Inventory of a warehouse", { full: z.boolean() }, async ({ full }) => {
  const res = await fetch(`${BASE}/inventory`, { method: full ? "POST" : "GET" });
  return { content: [{ type: "text", text: await res.text() }] };
});

server.tool("warehouse_report", "Report on a warehouse", {}, async () => {
  const found = await searchPost("/warehouse/search", {});
  return { content: [{ type: "text", text: JSON.stringify(found) }] };
});
