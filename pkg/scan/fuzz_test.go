package scan

import "testing"

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
