// Written for effectfence's scanner tests: registerTool with annotations, handlers calling a
// manager class whose methods write a file.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { promises as fs } from "fs";
import { z } from "zod";

class ShelfManager {
  constructor(private file: string) {}

  async shelveBooks(books: string[]): Promise<string[]> {
    await fs.writeFile(this.file, JSON.stringify(books));
    return books;
  }

  async browseShelf(): Promise<string[]> {
    return JSON.parse(await fs.readFile(this.file, "utf-8"));
  }
}

const shelf = new ShelfManager("shelf.json");
const server = new McpServer({ name: "shelf", version: "1.0.0" });

server.registerTool(
  "shelve_books",
  {
    title: "Shelve books",
    description: "Put books on the shelf",
    inputSchema: { books: z.array(z.string()) },
    annotations: { readOnlyHint: false, idempotentHint: false },
  },
  async ({ books }) => {
    const result = await shelf.shelveBooks(books);
    return { content: [{ type: "text" as const, text: JSON.stringify(result) }] };
  },
);

server.registerTool(
  "browse_shelf",
  {
    title: "Browse the shelf",
    description: "What is on the shelf",
    inputSchema: {},
    annotations: { readOnlyHint: true, idempotentHint: true },
  },
  async () => {
    const books = await shelf.browseShelf();
    return { content: [{ type: "text" as const, text: JSON.stringify(books) }] };
  },
);
