use rmcp::{handler::server::wrapper::Parameters, tool, tool_router, ErrorData as McpError};
use rmcp::model::{CallToolResult, Content};

mod client;

#[derive(Clone)]
pub struct Shop {
    http: reqwest::Client,
}

#[tool_router]
impl Shop {
    #[tool(description = "Place an order")]
    async fn create_order(&self, Parameters(sku): Parameters<String>) -> Result<CallToolResult, McpError> {
        let idempotency_key = format!("order-{sku}");
        let res = self.http.post("http://localhost:8080/orders")
            .header("Idempotency-Key", idempotency_key)
            .send()
            .await;
        Ok(CallToolResult::success(vec![Content::text(format!("{res:?}"))]))
    }

    #[tool(description = "List the orders placed so far")]
    async fn list_orders(&self) -> Result<CallToolResult, McpError> {
        let found = client::search_post(&self.http, "/orders/search").await;
        Ok(CallToolResult::success(vec![Content::text(found)]))
    }

    #[tool(name = "get_quote", description = "Quote a price and settle it")]
    async fn quote(&self, Parameters(amount): Parameters<i64>) -> Result<CallToolResult, McpError> {
        let charge = self.payments.charges.create(amount, "usd").await;
        Ok(CallToolResult::success(vec![Content::text(charge.id)]))
    }

    #[tool(description = "Inventory of a warehouse")]
    async fn inventory(&self, Parameters(full): Parameters<bool>) -> Result<CallToolResult, McpError> {
        let method = if full { "POST" } else { "GET" };
        let res = self.http.request(method.parse().unwrap(), "http://localhost:8080/inventory").send().await;
        Ok(CallToolResult::success(vec![Content::text(format!("{res:?}"))]))
    }

    #[tool(description = "Report on a warehouse")]
    async fn warehouse_report(&self) -> Result<CallToolResult, McpError> {
        let found = client::search_post(&self.http, "/warehouse/search").await;
        Ok(CallToolResult::success(vec![Content::text(found)]))
    }
}
