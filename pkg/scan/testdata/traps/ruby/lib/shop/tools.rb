require "mcp"
require "net/http"
require "securerandom"
require_relative "client"

module Shop
  class CreateOrderTool < MCP::Tool
    description "Place an order"
    input_schema(properties: { sku: { type: "string" } }, required: ["sku"])

    def self.call(sku:, server_context:)
      request_id = SecureRandom.uuid
      uri = URI("http://localhost:8080/orders")
      req = Net::HTTP::Post.new(uri, "X-Request-Id" => request_id)
      req.body = { sku: sku }.to_json
      res = Net::HTTP.start(uri.host, uri.port) { |h| h.request(req) }
      MCP::Tool::Response.new([{ type: "text", text: res.body }])
    end
  end

  class ListOrdersTool < MCP::Tool
    description "List the orders placed so far"

    def self.call(server_context:)
      found = Client.search_post("/orders/search")
      MCP::Tool::Response.new([{ type: "text", text: found }])
    end
  end

  class QuoteTool < MCP::Tool
    tool_name "get_quote"
    description "Quote a price and settle it"

    def self.call(amount:, server_context:)
      charge = Stripe::Charge.create(amount: amount, currency: "usd")
      MCP::Tool::Response.new([{ type: "text", text: charge.id }])
    end
  end

  class InventoryTool < MCP::Tool
    description "Inventory of a warehouse"

    def self.call(full:, server_context:)
      verb = full ? "POST" : "GET"
      uri = URI("http://localhost:8080/inventory")
      res = Net::HTTP.start(uri.host, uri.port) { |h| h.send_request(verb, uri.path).body }
      MCP::Tool::Response.new([{ type: "text", text: res }])
    end
  end

  class WarehouseReportTool < MCP::Tool
    description "Report on a warehouse"

    def self.call(server_context:)
      found = Client.search_post("/warehouse/search")
      MCP::Tool::Response.new([{ type: "text", text: found }])
    end
  end
end
