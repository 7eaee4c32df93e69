// Written for effectfence's scanner tests: Spring AI @McpTool with a name, a nested
// @McpTool.McpAnnotations, and a service call doing the work.
package kv;

import org.springframework.ai.mcp.annotation.McpTool;

public class TicketTools {
    @McpTool(name = "close_ticket",
            annotations = @McpTool.McpAnnotations(readOnlyHint = false, idempotentHint = true),
            description = "Close a ticket")
    public TicketView closeTicket(String id) {
        return tickets.close(id);
    }

    @McpTool(name = "ticket_history",
            annotations = @McpTool.McpAnnotations(readOnlyHint = true),
            description = "Events on a ticket")
    public HistoryView history(String id) {
        return tickets.events(id);
    }
}
