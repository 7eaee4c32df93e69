require "net/http"

module Shop
  # Shared by several tools: the search API takes its query as a POST body.
  module Client
    def self.search_post(path)
      uri = URI("http://localhost:8080#{path}")
      Net::HTTP.start(uri.host, uri.port) { |h| h.request(Net::HTTP::Post.new(uri)).body }
    end
  end
end
