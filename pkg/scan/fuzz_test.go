package scan

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// FuzzSource feeds arbitrary text, as every language, through everything that reads a
// file: declarations, sites, constants, functions, dispatch branches. None of it may panic,
// and every line it reports must exist.
func FuzzSource(f *testing.F) {
	for _, seed := range []string{
		"server.tool(\"x\", async () => { await fetch(u, { method: \"POST\" }) })",
		"@mcp.tool(name=\"x\")\ndef f(\n  a,\n):\n    requests.post(u)\n",
		"#[tool(description = \"a\nb\")]\nasync fn f(&self) {}\n",
		"s.AddTool(mcp.NewTool(string(X)), h)\nconst X T = \"x\"\n",
		"class XTool < MCP::Tool\n  tool_name \"x\"\nend\n",
		"@McpTool(name = \"x\", annotations = @McpTool.McpAnnotations(readOnlyHint = true))\npublic void f() {}",
		"{ method: 'create_refund', name: 'Create Refund', description: d, execute: e }",
		"TOOLS = [\n  { name: \"Write\", description: \"w\", inputSchema: {} }\n]\n",
		"t.name = TOOL_X;\nt.description = \"d\";\nt.inputSchema.type = \"object\";\n",
		"class A < ::MCP::Tool\n tool_name 'a'\n description 'b'\n input_schema(x)\nend\n",
		"name \"", "/* name: \"x\" description inputSchema",
		"\"\"\"unterminated", "(((((", "'\\", "#[tool(", "case X:", "x == \"", "`", "/*",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		for _, lang := range []string{langJS, langPython, langGo, langRust, langJava, langRuby} {
			s := newSource("f", lang, []byte(text))
			check := func(what string, n int) {
				if n < 1 || n > s.lineCount() {
					t.Fatalf("%s %s: line %d outside 1..%d", lang, what, n, s.lineCount())
				}
			}
			for _, d := range findDecls(s) {
				check("declaration", d.line)
				check("declaration start", d.from)
				check("declaration end", d.to)
			}
			w, g, r := fileSites(s)
			for _, ss := range [][]Site{w, g, r} {
				for _, x := range ss {
					check("site", x.Line)
				}
			}
			fileConsts(s)
			for _, fd := range fileFuncs(s) {
				check("function", fd.from)
			}
			for _, ds := range fileDispatch(s) {
				check("dispatch", ds.from)
			}
		}
	})
}

// FuzzScan runs a whole scan and all three reports over one arbitrary file per language,
// covering name resolution, block attachment and classification across files.
func FuzzScan(f *testing.F) {
	f.Add("server.tool(\"create_x\", async () => { await db.orders.create({}) })", "GitTools.X = \"x\"\ncase X:\n")
	f.Add("tool(A=", "#[tool(")
	f.Fuzz(func(t *testing.T, a, b string) {
		dir := t.TempDir()
		for i, ext := range []string{".ts", ".py", ".go", ".rs", ".java", ".rb"} {
			body := a
			if i%2 == 1 {
				body = a + "\n" + b
			}
			if err := os.WriteFile(filepath.Join(dir, "f"+ext), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		rep, err := Scan(context.Background(), dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range []func(io.Writer, *Report) error{
			func(w io.Writer, r *Report) error { return WriteText(w, r, true) },
			WriteJSON,
			func(w io.Writer, r *Report) error { return WriteSARIF(w, r, "fuzz") },
		} {
			if err := w(io.Discard, rep); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzPublished follows an arbitrary published tool name into an arbitrary file, as --run
// does, and writes all three reports.
func FuzzPublished(f *testing.F) {
	f.Add("create_x", "const t = { name: \"create_x\", description: \"d\", inputSchema: {} }\n")
	f.Add("x\"y", "'x\"y'")
	f.Add("", "/* \"a\" */")
	f.Fuzz(func(t *testing.T, name, text string) {
		dir := t.TempDir()
		for _, fn := range []string{"a.ts", "a.py", "a.rb"} {
			if err := os.WriteFile(filepath.Join(dir, fn), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ro := true
		rep, err := Scan(context.Background(), dir, Options{Published: []PublishedTool{{Name: name, Annotations: &Annotations{ReadOnlyHint: &ro}}}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Run == nil || len(rep.Run.Published) != 1 {
			t.Fatal("no run section")
		}
		if _, ok := findTool(rep, name); !ok {
			t.Fatalf("published tool %q missing from the report", name)
		}
		for _, w := range []func() error{
			func() error { return WriteJSON(io.Discard, rep) },
			func() error { return WriteText(io.Discard, rep, false) },
			func() error { return WriteSARIF(io.Discard, rep, "test") },
		} {
			if err := w(); err != nil {
				t.Fatal(err)
			}
		}
	})
}
