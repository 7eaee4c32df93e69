// Written for effectfence's scanner tests: one tool per module, its name in a module-level
// `const name`, its annotations in a config constant above the registration.
const name = "ping-host";
const config = {
    title: "Ping",
    description: "Round-trip time to a host",
    inputSchema: {},
    annotations: { readOnlyHint: true },
};
export const registerPingTool = (server) => {
    server.registerTool(name, config, async (args) => ({ content: [{ type: "text", text: await rtt(args.host) }] }));
};
