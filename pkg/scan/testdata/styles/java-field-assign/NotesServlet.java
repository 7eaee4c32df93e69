package example.notes;

// A servlet that builds its tools/list by assigning fields, and dispatches tools/call with a
// switch over constants.
public class NotesServlet extends BaseServlet {
    private static final String TOOL_LIST = "listNotes";
    private static final String TOOL_ARCHIVE = "archiveNote";

    @Override
    protected ListResponse toolsList(ListRequest req) {
        ListResponse res = super.toolsList(req);

        ListResponse.Tool list = new ListResponse.Tool();
        list.name = TOOL_LIST;
        list.description = "List the notes this server keeps.";
        list.inputSchema.type = "object";
        res.result.addTool(list);

        ListResponse.Tool archive = new ListResponse.Tool();
        archive.name = TOOL_ARCHIVE;
        archive.description = "Move one note to the archive.";
        archive.inputSchema.type = "object";
        archive.inputSchema.addProperty("id", Property.string("The note's id"));
        res.result.addTool(archive);
        return res;
    }

    @Override
    protected CallResponse toolsCall(CallRequest req) {
        switch (req.name()) {
            case TOOL_LIST:
                return ok(req, store.all());
            case TOOL_ARCHIVE:
                return ok(req, http.post("/notes/" + req.arg("id") + "/archive"));
            default:
                return null;
        }
    }
}
