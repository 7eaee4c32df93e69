// Written for effectfence's scanner tests: rmcp #[tool] methods inside #[tool(tool_box)]
// impls, #[tool(aggr)] parameters, feature-gated write tools, name = overriding the method.
use rmcp::{model::CallToolResult, tool, Error as McpError};

type McpResult = Result<CallToolResult, McpError>;

#[tool(tool_box)]
impl Board {
    pub fn new() -> Self {
        Self { client: Client::default() }
    }

    #[tool(description = "Get one card.
     Multi-line descriptions are allowed.")]
    async fn get_card(&self, #[tool(aggr)] request: GetCard) -> McpResult {
        let card = bridge::get_card(&self.client, request).await?;
        Ok(CallToolResult::success(vec![card.into()]))
    }

    #[cfg(feature = "writable")]
    #[tool(description = "Move a card to another column.")]
    async fn move_card(&self, #[tool(aggr)] request: MoveCard) -> McpResult {
        let card = bridge::move_card(&self.client, request).await?;
        Ok(CallToolResult::success(vec![card.into()]))
    }

    #[tool(name = "tally_cards", description = "Count the cards in a column.")]
    async fn count(&self, #[tool(aggr)] request: Column) -> McpResult {
        Ok(CallToolResult::success(vec![self.client.count(request).await?.into()]))
    }

    #[tool(description = "Bump the card counter")]
    async fn increment(&self) -> McpResult {
        let mut n = self.counter.lock().await;
        *n += 1;
        Ok(CallToolResult::success(vec![n.to_string().into()]))
    }
}

#[tool(tool_box)]
impl rmcp::ServerHandler for Board {
    fn get_info(&self) -> ServerInfo {
        ServerInfo::default()
    }
}
