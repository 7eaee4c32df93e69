// Written for effectfence's scanner tests: MCP Java SDK tool specifications built with
// Tool.builder().name(...) and a lambda handler, one factory method per tool.
package kv;

import io.modelcontextprotocol.server.McpServerFeatures;
import io.modelcontextprotocol.spec.McpSchema.Tool;

public class StackTools {
    private McpServerFeatures.SyncToolSpecification stackPush() {
        return new McpServerFeatures.SyncToolSpecification(
                Tool.builder().name("stack_push").description("Push a value").inputSchema(MAPPER, SCHEMA).build(),
                (exchange, request) -> {
                    boolean ok = client.getStack(name(request)).offer(request.arguments().get("value"));
                    return textResult(String.valueOf(ok));
                }
        );
    }

    private McpServerFeatures.SyncToolSpecification stackPoll() {
        return new McpServerFeatures.SyncToolSpecification(
                Tool.builder().name("stack_poll").description("Remove and return the top value").inputSchema(MAPPER, SCHEMA).build(),
                (exchange, request) -> textResult(String.valueOf(client.getStack(name(request)).poll()))
        );
    }

    private McpServerFeatures.SyncToolSpecification stackPeek() {
        return new McpServerFeatures.SyncToolSpecification(
                Tool.builder().name("stack_peek").description("Look at the top value").inputSchema(MAPPER, SCHEMA).build(),
                (exchange, request) -> textResult(String.valueOf(client.getStack(name(request)).peek()))
        );
    }
}
