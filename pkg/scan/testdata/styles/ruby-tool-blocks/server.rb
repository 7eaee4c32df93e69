require 'mcp'

name "lab-notes"

tool "list_notes" do
  description "List the notes in the lab book"
  call { Notes.all.map(&:title) }
end

tool "add_note" do
  description "Add a note to the lab book"
  argument :text, String, required: true, description: "The note"
  call do |args|
    Notes.create(text: args[:text])
  end
end
