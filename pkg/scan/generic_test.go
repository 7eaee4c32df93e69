package scan

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A tree with no declaration says so, whether or not its files hint at tools.
func TestNotesNeverSilentZero(t *testing.T) {
	plain := scanDir(t, writeTree(t, map[string]string{"main.go": "package main\n\nfunc main() {}\n"}), Options{})
	if len(plain.Notes) != 1 || plain.Notes[0].Kind != "no_declarations" {
		t.Fatalf("no tools and no hints: notes %+v", plain.Notes)
	}
	hinted := scanDir(t, writeTree(t, map[string]string{
		"srv.ts": "import { make } from './x';\nconst reg = make();\nreg.registerTool(buildName(), spec, run);\n",
	}), Options{})
	if len(hinted.Notes) != 1 || hinted.Notes[0].Kind != "no_declarations" || len(hinted.Notes[0].Files) != 1 || hinted.Notes[0].Files[0] != "srv.ts" {
		t.Fatalf("a hinted file with nothing resolved: notes %+v", hinted.Notes)
	}
	partial := scanDir(t, writeTree(t, map[string]string{
		"a.ts": "server.registerTool('create_item', { description: 'x', inputSchema: {} }, async () => { await api.items.create(); });\n",
		"b.py": "@mcp.tool\n",
	}), Options{})
	if len(partial.Notes) != 1 || partial.Notes[0].Kind != "unresolved_files" || partial.Notes[0].Files[0] != "b.py" {
		t.Fatalf("one file resolved, one hinted and not: notes %+v", partial.Notes)
	}
}

// Shapes that are not tools: a JSON sample in a block comment, an OpenAPI parameter, a server
// info object, a Go struct field declaration.
func TestShapeNotTools(t *testing.T) {
	rep := scanDir(t, writeTree(t, map[string]string{
		"Sample.java": "/* tools/list sample\n{\n  \"name\": \"ping_tool\",\n  \"description\": \"x\",\n  \"inputSchema\": {}\n}\n*/\npublic class Sample {}\n",
		"spec.ts":     "// tool parameters from OpenAPI\nconst p = { name: 'petId', in: 'path', description: 'id', schema: { type: 'string' } };\n",
		"info.py":     "# tool server\nINFO = {'name': 'my-server', 'version': '1.0'}\n",
		"types.go":    "package x\n\n// Tool is a tool\ntype Tool struct {\n\tName ToolName\n\tDescription string\n\tInputSchema Schema\n}\n",
	}), Options{})
	if n := len(rep.Candidates) + len(rep.Others); n != 0 {
		t.Fatalf("declared %d tools from non-tool shapes: %v %v", n, toolNames(rep.Candidates), toolNames(rep.Others))
	}
}

// --run against a real npm server (scripts/install-peers): its tools/list is the ground
// truth, each published name is followed into the code, and the published annotations sit
// beside what the code suggests.
func TestRunRealServer(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed; --run against a real server needs it")
	}
	pkg := filepath.Join("..", "..", ".peers", "node_modules", "@modelcontextprotocol", "server-everything", "dist")
	if _, err := os.Stat(pkg); err != nil {
		t.Skip("npm peers not installed (.peers missing); run scripts/install-peers")
	}
	ctx := context.Background()
	cmd := []string{node, filepath.Join(pkg, "index.js"), "stdio"}
	pub, err := ListPublished(ctx, RunConfig{Command: cmd, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(pub) < 5 {
		t.Fatalf("server-everything published %d tools", len(pub))
	}
	rep := scanDir(t, pkg, Options{Published: pub, RunCommand: cmd})
	if rep.Run == nil || len(rep.Run.Published) != len(pub) {
		t.Fatal("no run section")
	}
	if len(rep.Run.NotInCode) != 0 {
		t.Errorf("published tools not found in the compiled code: %v", rep.Run.NotInCode)
	}
	// the annotation counts as evidence: simulate-research-query is published as not
	// read-only, which its read-sounding name hides
	sim, ok := findTool(rep, "simulate-research-query")
	if !ok || !sim.Candidate || sim.Published == nil || !*sim.Published || sim.Annotations == nil {
		t.Fatalf("simulate-research-query: %+v", sim)
	}
	found := false
	for _, d := range rep.Run.Disagreements {
		if d.Tool == "simulate-research-query" && strings.Contains(d.Annotation, "readOnlyHint false") {
			found = true
		}
	}
	if !found {
		t.Errorf("disagreement on simulate-research-query not reported: %+v", rep.Run.Disagreements)
	}
	// docs/scan.md: SARIF carries each disagreement as a result of rule EF1003.
	var sarif bytes.Buffer
	if err := WriteSARIF(&sarif, rep, "test"); err != nil {
		t.Fatal(err)
	}
	var log struct {
		Runs []struct {
			Results []struct {
				RuleID  string `json:"ruleId"`
				Message struct {
					Text string `json:"text"`
				} `json:"message"`
			} `json:"results"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(sarif.Bytes(), &log); err != nil || len(log.Runs) != 1 {
		t.Fatalf("SARIF does not parse: %v", err)
	}
	ef1003 := 0
	for _, r := range log.Runs[0].Results {
		if r.RuleID == RuleDisagreement {
			ef1003++
			if !strings.Contains(r.Message.Text, "simulate-research-query") && len(rep.Run.Disagreements) == 1 {
				t.Errorf("EF1003 result about another tool: %s", r.Message.Text)
			}
		}
	}
	if ef1003 != len(rep.Run.Disagreements) {
		t.Errorf("SARIF has %d EF1003 results for %d disagreements", ef1003, len(rep.Run.Disagreements))
	}
	echo, ok := findTool(rep, "echo")
	if !ok || echo.Candidate {
		t.Errorf("echo: %+v", echo)
	}
	// a declaration the server did not publish to this client is listed, not dropped
	for _, n := range rep.Run.NotPublished {
		if _, ok := findTool(rep, n); !ok {
			t.Errorf("%s listed as not published but missing from the report", n)
		}
	}
}

// A server that cannot start is an error that says so, never an empty list.
func TestRunBadServer(t *testing.T) {
	_, err := ListPublished(context.Background(), RunConfig{Command: []string{"/nonexistent/server"}, Timeout: 10 * time.Second})
	if err == nil {
		t.Fatal("a missing server gave no error")
	}
	sh, lerr := exec.LookPath("sh")
	if lerr != nil {
		t.Skip("no sh")
	}
	_, err = ListPublished(context.Background(), RunConfig{Command: []string{sh, "-c", "exit 3"}, Timeout: 10 * time.Second})
	if err == nil {
		t.Fatal("a server that exits gave no error")
	}
}

// A register call or a schema that no declaration covers is named by line even when other
// tools were found in the same file: a computed name beside a literal one, tools built in a
// loop beside a constant list. Before, the file counted as resolved and the tools it could
// not name were missing from the report without a word.
func TestNotesNameUnresolvedSitesBesideFoundTools(t *testing.T) {
	rep := scanDir(t, writeTree(t, map[string]string{
		"a.ts": "server.tool(\"list_things\", \"List things\", {}, async () => ({}));\n" +
			"server.registerTool(`${PREFIX}_send_email`, { description: \"Send an email\", inputSchema: { to: z.string() } }, async () => { await fetch(u, { method: \"POST\" }) });\n",
		"b.ts": "export const tools = [\n  { name: \"list_a\", description: \"List a\", inputSchema: { type: \"object\" } },\n];\n" +
			"const more = names.map(n => ({ name: n, description: \"Do \" + n, inputSchema: { type: \"object\" } }));\n",
		"c.ts": "server.tool(\"send_invoice\", \"Send\", {}, async () => { await fetch(u, { method: \"POST\" }) });\n",
	}), Options{})
	var sites []string
	for _, n := range rep.Notes {
		if n.Kind == "unresolved_sites" {
			sites = n.Files
		}
	}
	if want := []string{"a.ts:2", "b.ts:4"}; !reflect.DeepEqual(sites, want) {
		t.Errorf("unresolved sites %v, want %v (notes %+v)", sites, want, rep.Notes)
	}
	// every site covered: no note (rmcp's #[tool(tool_box)] on an impl is not a site)
	for _, dir := range []string{filepath.Join("testdata", "styles", "rust-rmcp-attrs"), filepath.Join("testdata", "styles", "ts-register-tool")} {
		for _, n := range scanDir(t, dir, Options{}).Notes {
			if n.Kind == "unresolved_sites" {
				t.Errorf("%s: %+v", dir, n)
			}
		}
	}
}

// TestPublishedHintsOfOtherTypes: a listing with hints that are not booleans ("readOnlyHint":
// "yes", 1, null) or annotations that are not an object keeps every tool, with those hints
// taken as not given; the other tools' hints are read as published. Before, one such entry
// failed the whole --run ("tools/list result is not a tool list").
func TestPublishedHintsOfOtherTypes(t *testing.T) {
	page := `{"tools":[
		{"name":"odd","annotations":{"title":5,"readOnlyHint":"yes","destructiveHint":1,"idempotentHint":null}},
		{"name":"flat","annotations":"read-only"},
		{"name":"send","annotations":{"title":"Send","readOnlyHint":false,"destructiveHint":true}}
	],"nextCursor":"c2"}`
	tools, next, err := parsePublished(json.RawMessage(page))
	if err != nil || next != "c2" || len(tools) != 3 {
		t.Fatalf("parsePublished: %d tools, next %q, %v; want 3 tools, c2", len(tools), next, err)
	}
	if a := tools[0].Annotations; a == nil || a.ReadOnlyHint != nil || a.DestructiveHint != nil || a.IdempotentHint != nil || a.Title != "" {
		t.Fatalf("odd: %+v; want every hint not given", a)
	}
	if a := tools[1].Annotations; a == nil || a.saysReadOnly() || a.saysEffect() {
		t.Fatalf("flat: %+v; want nothing said", a)
	}
	if a := tools[2].Annotations; a == nil || a.Title != "Send" || !a.saysEffect() || annotationText(a) != "readOnlyHint false, destructiveHint true" {
		t.Fatalf("send: %+v; want its hints as published", a)
	}
	if _, _, err := parsePublished(json.RawMessage(`{"tools":[{"description":"no name"}]}`)); err == nil {
		t.Fatal("a tool without a name was accepted")
	}
}

// TestPublishedOnlyToolsSayWhereTheyAre: a tool the running server publishes and the code does
// not show has no file to point at; the text report said ":0" for its place, as if a file with
// no name had it on line 0.
func TestPublishedOnlyToolsSayWhereTheyAre(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not installed; --run against a real server needs it")
	}
	pkg := filepath.Join("..", "..", ".peers", "node_modules", "@modelcontextprotocol", "server-memory", "dist")
	if _, err := os.Stat(pkg); err != nil {
		t.Skip("npm peers not installed (.peers missing); run scripts/install-peers")
	}
	t.Setenv("MEMORY_FILE_PATH", filepath.Join(t.TempDir(), "memory.jsonl"))
	cmd := []string{node, filepath.Join(pkg, "index.js")}
	pub, err := ListPublished(context.Background(), RunConfig{Command: cmd, Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rep := scanDir(t, t.TempDir(), Options{Published: pub, RunCommand: cmd})
	if len(rep.Candidates) == 0 || len(rep.Others) == 0 || len(rep.Run.NotInCode) != len(pub) {
		t.Fatalf("candidates %v, others %v, not in code %v", toolNames(rep.Candidates), toolNames(rep.Others), rep.Run.NotInCode)
	}
	var b bytes.Buffer
	if err := WriteText(&b, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, ":0 ") || strings.Contains(l, " :0") {
			t.Errorf("a place with no file: %q", l)
		}
	}
	for _, tl := range append(append([]Tool{}, rep.Candidates...), rep.Others...) {
		if !regexp.MustCompile(`(?m)^\s*(│\s*)?` + regexp.QuoteMeta(tl.Name) + `\s+(│\s*)?not in the code\b`).MatchString(b.String()) {
			t.Errorf("%s: not said to be not in the code:\n%s", tl.Name, b.String())
		}
	}
}
