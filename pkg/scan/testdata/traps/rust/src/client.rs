/// Shared by several tools: the search API takes its query as a POST body.
pub async fn search_post(http: &reqwest::Client, path: &str) -> String {
    let url = format!("http://localhost:8080{path}");
    match http.post(url).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(e) => e.to_string(),
    }
}
