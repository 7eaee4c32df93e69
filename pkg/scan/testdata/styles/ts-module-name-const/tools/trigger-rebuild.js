// Written for effectfence's scanner tests: an effect-named tool whose config says it is not
// read-only and whose code posts.
const name = "trigger-rebuild";
const config = {
    title: "Rebuild",
    description: "Start a rebuild of the index",
    inputSchema: {},
    annotations: { readOnlyHint: false },
};
export const registerRebuildTool = (server) => {
    server.registerTool(name, config, async () => {
        await fetch(`${BASE}/rebuild`, { method: "POST" });
        return { content: [{ type: "text", text: "started" }] };
    });
};
