package shop;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

/** Shared by several tools: the search API takes its query as a POST body. */
public class SearchClient {
    private final HttpClient http = HttpClient.newHttpClient();

    public String searchPost(String path) throws Exception {
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://localhost:8080" + path))
            .method("POST", HttpRequest.BodyPublishers.noBody())
            .build();
        return http.send(req, HttpResponse.BodyHandlers.ofString()).body();
    }
}
