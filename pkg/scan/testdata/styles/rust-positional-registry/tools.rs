// An own registry: each tool is registered with its name, a description and a JSON schema
// as positional arguments, then a closure that runs it.
use super::Registry;

pub fn register(reg: &mut Registry) {
    reg.register(
        "show_lease",
        "Show the DHCP lease of one host.",
        serde_json::json!({
            "type": "object",
            "properties": { "host": { "type": "string" } }
        }),
        |client, params| async move { client.get(&format!("/leases/{}", params["host"])).await },
    );
    reg.register(
        "pin_lease",
        "Pin one host to its current address.",
        serde_json::json!({
            "type": "object",
            "properties": { "host": { "type": "string" } }
        }),
        |client, params| async move { client.post("/leases/pin", &params).await },
    );
}
