// Written for effectfence's scanner tests: names through constants, and a wrapper function
// around the SDK's tool registration.
import { SCHEDULE_CALL, TOOL_NAMES } from "./names.js";

function defineTool(name: string, description: string, handler: Handler) {
  server.tool(name, description, {}, handler);
}

server.tool(TOOL_NAMES.LOOKUP, "Find a contact", { q: z.string() }, async ({ q }) => {
  return reply(await crm.contacts.search(q));
});

server.tool(TOOL_NAMES.NOTIFY, "Text a contact", { id: z.string() }, async ({ id }) => {
  return reply(await sms.messages.create({ to: id, body: "hello" }));
});

defineTool(SCHEDULE_CALL, "Book a call", async (args) => reply(await calendar.events.insert(args)));

defineTool("contact_card", "A contact's card", async ({ id }) => reply(await crm.contacts.get(id)));
