# A hand-rolled stdio server: tools are hashes in a constant list, and the call is
# dispatched to a method named after the tool.
require "json"

DEFINITIONS = [
  {
    name: "SaveNote",
    description: "Store a note on disk",
    inputSchema: { type: "object", properties: { text: { type: "string" } } }
  },
  {
    name: "ShowNote",
    description: "Show a stored note",
    inputSchema: { type: "object", properties: { id: { type: "string" } } }
  },
  {
    name: "Purge",
    description: "Forget every note",
    inputSchema: { type: "object", properties: {} }
  }
]

module Runner
  module_function

  def dispatch(name, args)
    send(name.downcase.to_sym, args)
  end

  def savenote(args)
    File.write("notes/#{args["id"]}.txt", args["text"])
  end

  def shownote(args)
    File.read("notes/#{args["id"]}.txt")
  end

  def purge(_args)
    FileUtils.rm_rf("notes")
  end
end
