# Written for effectfence's scanner tests: the declaration style of a low-level Python MCP
# server that names tools through an Enum and runs them from a match/case dispatch.
from enum import Enum

from mcp.server import Server
from mcp.types import TextContent, Tool


class NoteTools(str, Enum):
    SHOW = "note_show"
    HISTORY = "note_history"
    SAVE = "note_save"
    ARCHIVE = "note_archive"


def note_show(store, note_id):
    return store.get(note_id)


def note_history(store, note_id):
    return store.versions(note_id)


def note_save(store, note_id, body):
    store.db.execute("INSERT INTO notes (id, body) VALUES (?, ?)", (note_id, body))
    return "saved"


def note_archive(store, note_id):
    store.db.execute("UPDATE notes SET archived = 1 WHERE id = ?", (note_id,))
    return "archived"


def serve(store):
    server = Server("notes")

    @server.list_tools()
    async def list_tools():
        return [
            Tool(name=NoteTools.SHOW, description="Show a note", inputSchema={}),
            Tool(name=NoteTools.HISTORY, description="Versions of a note", inputSchema={}),
            Tool(name=NoteTools.SAVE, description="Save a note", inputSchema={}),
            Tool(name=NoteTools.ARCHIVE, description="Archive a note", inputSchema={}),
        ]

    @server.call_tool()
    async def call_tool(name, arguments):
        match name:
            case NoteTools.SHOW:
                return [TextContent(type="text", text=note_show(store, arguments["id"]))]
            case NoteTools.HISTORY:
                return [TextContent(type="text", text=note_history(store, arguments["id"]))]
            case NoteTools.SAVE:
                return [TextContent(type="text", text=note_save(store, arguments["id"], arguments["body"]))]
            case NoteTools.ARCHIVE:
                return [TextContent(type="text", text=note_archive(store, arguments["id"]))]
