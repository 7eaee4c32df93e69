package shop;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.util.UUID;

import org.springframework.ai.tool.annotation.Tool;
import org.springframework.stereotype.Service;

@Service
public class ShopTools {
    private final HttpClient http = HttpClient.newHttpClient();
    private final SearchClient search = new SearchClient();

    @Tool(description = "Place an order")
    public String createOrder(String sku) throws Exception {
        String clientToken = UUID.randomUUID().toString();
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://localhost:8080/orders"))
            .header("X-Client-Token", clientToken)
            .POST(HttpRequest.BodyPublishers.ofString(sku))
            .build();
        return http.send(req, java.net.http.HttpResponse.BodyHandlers.ofString()).body();
    }

    @Tool(description = "List the orders placed so far")
    public String listOrders() throws Exception {
        return search.searchPost("/orders/search");
    }

    @Tool(name = "get_quote", description = "Quote a price and settle it")
    public String quote(long amount) throws Exception {
        return payments.charges().create(amount, "usd").getId();
    }

    @Tool(description = "Inventory of a warehouse")
    public String inventory(boolean full) throws Exception {
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://localhost:8080/inventory"))
            .method(full ? "POST" : "GET", HttpRequest.BodyPublishers.noBody())
            .build();
        return http.send(req, java.net.http.HttpResponse.BodyHandlers.ofString()).body();
    }

    @Tool(description = "Report on a warehouse")
    public String warehouseReport() throws Exception {
        return search.searchPost("/warehouse/search");
    }
}
