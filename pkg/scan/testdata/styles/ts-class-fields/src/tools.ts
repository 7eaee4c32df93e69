// Written for effectfence's scanner tests: one class per tool with a name (or static
// toolName) field, a description, an args shape and an execute method.
export class InsertRowsTool extends DbToolBase {
    public name = "insert-rows";
    protected description = "Insert rows into a table";
    protected argsShape = { table: z.string(), rows: z.array(z.object({})) };

    protected async execute({ table, rows }: Args): Promise<CallToolResult> {
        const provider = await this.ensureConnected();
        const result = await provider.insertMany(table, rows);
        return { content: [{ type: "text", text: `${result.insertedCount}` }] };
    }
}

export class RenameTableTool extends DbToolBase {
    static toolName = "rename-table";
    public description = "Rename a table";
    public argsShape = { table: z.string(), newName: z.string() };

    protected async execute({ table, newName }: Args): Promise<CallToolResult> {
        const provider = await this.ensureConnected();
        await provider.renameTable(table, newName);
        return { content: [{ type: "text", text: "renamed" }] };
    }
}

export class TallyTool extends DbToolBase {
    public name = "tally";
    public description = "Number of rows matching a filter";
    public argsShape = { table: z.string() };

    public async execute({ table }: Args): Promise<CallToolResult> {
        const provider = await this.ensureConnected();
        return { content: [{ type: "text", text: `${await provider.count(table)}` }] };
    }
}
