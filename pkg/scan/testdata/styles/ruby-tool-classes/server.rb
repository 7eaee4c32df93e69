# Written for effectfence's scanner tests: MCP::Tool subclasses, names from the class name or
# tool_name, calls without parentheses into a helper class.
require "mcp"

class StockHelper
  def self.restock_all
    STORE.col("stock").add(quantity: 100)
  end

  def self.row_count
    STORE.col("stock").get.size
  end
end

class CountStockTool < MCP::Tool
  description "How many stock rows exist"

  def self.call(*)
    MCP::Tool::Response.new([{ type: "text", text: StockHelper.row_count.to_s }])
  end
end

class RestockTool < MCP::Tool
  tool_name "restock"
  description "Refill every shelf"

  def self.call(*)
    StockHelper.restock_all
    MCP::Tool::Response.new([{ type: "text", text: "done" }])
  end
end

class WipeStockTool < MCP::Tool
  description "Clear all stock rows"

  def self.call(*)
    STORE.col("stock").get.each { |doc| doc.ref.delete }
    MCP::Tool::Response.new([{ type: "text", text: "wiped" }])
  end
end
