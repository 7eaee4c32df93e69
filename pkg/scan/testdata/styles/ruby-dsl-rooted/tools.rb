require 'mcp'

module Lab
  # tool classes under the root namespace
  class FetchSample < ::MCP::Tool
    tool_name 'fetch_sample'
    description 'Fetch one sample record'
    input_schema(properties: { id: { type: 'string' } }, required: ['id'])

    def self.call(id:, server_context: nil)
      Net::HTTP.get(URI("https://lab.example/samples/#{id}"))
    end
  end

  class Enqueue < ::MCP::Tool
    tool_name 'enqueue_run'
    description 'Queue an analysis run'
    input_schema(properties: { id: { type: 'string' } }, required: ['id'])

    def self.call(id:, server_context: nil)
      Net::HTTP.post(URI("https://lab.example/runs"), { id: id }.to_json)
    end
  end
end
