package scan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

func scanDir(t *testing.T, dir string, opts Options) *Report {
	t.Helper()
	rep, err := Scan(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("Scan(%s): %v", dir, err)
	}
	return rep
}

func toolNames(ts []Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	sort.Strings(out)
	return out
}

func findTool(rep *Report, name string) (Tool, bool) {
	for _, t := range append(append([]Tool{}, rep.Candidates...), rep.Others...) {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

// Every language's trap fixture declares the same five tools in its own idiom:
// create_order (write with a guard), list_orders (read, declared right after the write,
// calling a shared helper that POSTs), get_quote (read-named, moves money), inventory
// (neutral name, method chosen at run time between POST and GET), warehouse_report (neutral,
// calls the shared helper).
func TestTraps(t *testing.T) {
	helperFile := map[string]string{
		"ts": "src/client.ts", "python": "shop_server/client.py", "go": "server/client.go",
		"rust": "src/client.rs", "java": "src/main/java/shop/SearchClient.java", "ruby": "lib/shop/client.rb",
	}
	for lang, helper := range helperFile {
		t.Run(lang, func(t *testing.T) {
			rep := scanDir(t, filepath.Join("testdata", "traps", lang), Options{})
			cands, others := toolNames(rep.Candidates), toolNames(rep.Others)
			// Java names tools after their methods unless @Tool(name=...) says otherwise.
			wantC := []string{"create_order", "get_quote", "inventory"}
			wantO := []string{"list_orders", "warehouse_report"}
			if lang == "java" {
				wantC = []string{"createOrder", "get_quote", "inventory"}
				wantO = []string{"listOrders", "warehouseReport"}
			}
			if !reflect.DeepEqual(cands, wantC) || !reflect.DeepEqual(others, wantO) {
				t.Fatalf("candidates %v (want %v), not candidates %v (want %v)", cands, wantC, others, wantO)
			}

			t.Run("read after write does not inherit its words", func(t *testing.T) {
				r, _ := findTool(rep, wantO[0])
				w, _ := findTool(rep, wantC[0])
				if len(r.Evidence) != 0 || len(r.Guards) != 0 {
					t.Errorf("%s took evidence %v guards %v", r.Name, r.Evidence, r.Guards)
				}
				if len(w.Evidence) == 0 {
					t.Errorf("%s has no write evidence", w.Name)
				}
				// the read tool's code is the one that searches; none of it may be the write's
				for _, e := range w.Evidence {
					if strings.Contains(strings.ToLower(e.Text), "search") {
						t.Errorf("%s's evidence %s:%d is the read tool's code", w.Name, e.File, e.Line)
					}
				}
				for _, v := range r.Via {
					if strings.Contains(strings.ToLower(v), "create") {
						t.Errorf("%s followed the write tool's handler %s", r.Name, v)
					}
				}
			})

			t.Run("guards by identifier words", func(t *testing.T) {
				w, _ := findTool(rep, wantC[0])
				if len(w.Guards) == 0 || len(rep.Guards) == 0 {
					t.Fatalf("no guard found for %s; repository guards %v", w.Name, rep.Guards)
				}
			})

			t.Run("shared helper writes are corroboration only", func(t *testing.T) {
				inRepo := false
				for _, s := range rep.Writes {
					if s.File == helper {
						inRepo = true
					}
				}
				if !inRepo {
					t.Errorf("helper %s's write not in repository writes %v", helper, rep.Writes)
				}
				for _, tl := range append(append([]Tool{}, rep.Candidates...), rep.Others...) {
					for _, e := range tl.Evidence {
						if e.File == helper {
							t.Errorf("tool %s claims the shared helper's write %s:%d", tl.Name, e.File, e.Line)
						}
					}
				}
			})

			t.Run("conditional HTTP method is a possible write", func(t *testing.T) {
				inv, _ := findTool(rep, "inventory")
				found := false
				for _, e := range inv.Evidence {
					if strings.Contains(e.Text, `"POST"`) {
						found = true
					}
				}
				if !inv.Candidate || !found {
					t.Errorf("inventory: candidate=%v evidence=%v", inv.Candidate, inv.Evidence)
				}
			})

			t.Run("read-named tool that moves money", func(t *testing.T) {
				q, _ := findTool(rep, "get_quote")
				if !q.Candidate || !q.Money {
					t.Errorf("get_quote: candidate=%v money=%v reason=%q", q.Candidate, q.Money, q.Reason)
				}
			})
		})
	}
}

// verdictWords would claim more than a source scan can know.
var verdictWords = []string{"vulnerab", "is safe", "unsafe", "not safe", "will double", "will fire",
	"fires twice", "confirmed", "definitely", "guaranteed", "proven", "is idempotent", "not idempotent", "verdict:"}

func TestNoVerdictWording(t *testing.T) {
	for _, lang := range []string{"ts", "python", "go", "rust", "java", "ruby"} {
		rep := scanDir(t, filepath.Join("testdata", "traps", lang), Options{})
		var text, js, sarif bytes.Buffer
		if err := WriteText(&text, rep, false); err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(&js, rep); err != nil {
			t.Fatal(err)
		}
		if err := WriteSARIF(&sarif, rep, "test"); err != nil {
			t.Fatal(err)
		}
		for name, out := range map[string]string{"text": text.String(), "json": js.String(), "sarif": sarif.String()} {
			low := strings.ToLower(out)
			for _, w := range verdictWords {
				if strings.Contains(low, w) {
					t.Errorf("%s %s output says %q", lang, name, w)
				}
			}
			if !strings.Contains(low, "candidate") {
				t.Errorf("%s %s output never says candidate", lang, name)
			}
		}
		if !strings.Contains(text.String(), "What a source scan cannot see") || strings.Contains(text.String(), "\x1b[") {
			t.Errorf("%s text: missing the cannot-see list or has colour codes", lang)
		}
	}
}

func TestSplitWords(t *testing.T) {
	cases := map[string][]string{
		"deriveIdempotencyKey":   {"derive", "idempotency", "key"},
		"derive_idempotency_key": {"derive", "idempotency", "key"},
		"derive-idempotency-key": {"derive", "idempotency", "key"},
		"HTTPRequestID":          {"http", "request", "id"},
		"clientToken":            {"client", "token"},
		"git_create_branch":      {"git", "create", "branch"},
		"Tool::new":              {"tool", "new"},
		"v2Create":               {"v2", "create"},
		"":                       nil,
	}
	for in, want := range cases {
		if got := splitWords(in); !reflect.DeepEqual(got, want) {
			t.Errorf("splitWords(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestClassifyName(t *testing.T) {
	cases := []struct {
		name                  string
		vetoed, neutral, cand bool
		money                 bool
	}{
		{"create_refund", false, false, true, true},
		{"get_quote", true, false, false, false},
		{"list_invoices", true, false, false, true},
		{"set_status", false, false, true, false},
		{"git_status", true, false, false, false},
		{"get_or_create_user", false, false, true, false},
		{"issue_write", false, false, true, false},
		{"sendMessage", false, false, true, false},
		{"inventory", false, true, false, false},
		{"search-and-replace", false, false, true, false},
	}
	for _, c := range cases {
		got := classifyName(c.name)
		if got.vetoed != c.vetoed || got.neutral != c.neutral || (len(got.effect) > 0 && !got.vetoed) != c.cand || (len(got.money) > 0) != c.money {
			t.Errorf("classifyName(%q) = %+v", c.name, got)
		}
	}
}

func TestGuardAndRetrySites(t *testing.T) {
	code := strings.Join([]string{
		`const key = deriveIdempotencyKey(args)`,
		`headers["X-Request-Id"] = requestId`,
		`input := &ec2.RunInstancesInput{ClientToken: aws.String(token)}`,
		`INSERT INTO orders (id) VALUES ($1) ON CONFLICT DO NOTHING`,
		`await db.orders.upsert({ where: { id } })`,
		`const requestBody = JSON.stringify(x)`,
		`tokenizer.encode(text)`,
		`for attempt := 0; attempt < maxRetries; attempt++ {`,
		`// idempotency key goes here one day`,
	}, "\n")
	s := newSource("x.ts", langJS, []byte(code))
	writes, guards, retries := fileSites(s)
	var lines []int
	for _, g := range guards {
		lines = append(lines, g.Line)
	}
	if want := []int{1, 2, 3, 4, 5}; !reflect.DeepEqual(lines, want) {
		t.Errorf("guard lines %v, want %v (%v)", lines, want, guards)
	}
	if len(retries) != 1 || retries[0].Line != 8 {
		t.Errorf("retries %v, want line 8", retries)
	}
	if len(writes) != 2 || writes[0].Line != 4 || writes[0].Kind != "sql" || writes[1].Line != 5 {
		t.Errorf("writes %v, want the INSERT on line 4 and the upsert on line 5", writes)
	}
}

func TestSARIFRequiredFields(t *testing.T) {
	for _, dir := range []string{filepath.Join("testdata", "traps", "ts"), t.TempDir()} {
		rep := scanDir(t, dir, Options{})
		var buf bytes.Buffer
		if err := WriteSARIF(&buf, rep, "1.2.3"); err != nil {
			t.Fatal(err)
		}
		var log map[string]any
		if err := json.Unmarshal(buf.Bytes(), &log); err != nil {
			t.Fatalf("SARIF is not JSON: %v", err)
		}
		checkSARIF(t, log, len(rep.Candidates))
	}
}

// checkSARIF checks the properties the SARIF 2.1.0 schema requires of a log, its runs,
// tool, driver, rules, results, locations and regions.
func checkSARIF(t *testing.T, log map[string]any, wantResults int) {
	t.Helper()
	if log["version"] != "2.1.0" {
		t.Fatalf("version = %v", log["version"])
	}
	if s, _ := log["$schema"].(string); !strings.Contains(s, "sarif-2.1.0") {
		t.Errorf("$schema = %v", log["$schema"])
	}
	runs, ok := log["runs"].([]any)
	if !ok || len(runs) != 1 {
		t.Fatalf("runs = %v", log["runs"])
	}
	run := runs[0].(map[string]any)
	driver, ok := run["tool"].(map[string]any)["driver"].(map[string]any)
	if !ok || driver["name"] != "effectfence" {
		t.Fatalf("tool.driver = %v", run["tool"])
	}
	rules := driver["rules"].([]any)
	ruleIDs := map[string]int{}
	for i, r := range rules {
		rm := r.(map[string]any)
		id, _ := rm["id"].(string)
		if id == "" {
			t.Errorf("rule %d has no id", i)
		}
		if sd, _ := rm["shortDescription"].(map[string]any); sd == nil || sd["text"] == "" {
			t.Errorf("rule %s has no shortDescription.text", id)
		}
		ruleIDs[id] = i
	}
	results, ok := run["results"].([]any)
	if !ok || len(results) != wantResults {
		t.Fatalf("results = %d (%T), want %d", len(results), run["results"], wantResults)
	}
	levels := map[string]bool{"none": true, "note": true, "warning": true, "error": true}
	for i, r := range results {
		rm := r.(map[string]any)
		msg, _ := rm["message"].(map[string]any)
		if msg == nil || msg["text"] == "" {
			t.Errorf("result %d has no message.text", i)
		}
		id, _ := rm["ruleId"].(string)
		idx, found := ruleIDs[id]
		if !found || int(rm["ruleIndex"].(float64)) != idx {
			t.Errorf("result %d: ruleId %q ruleIndex %v do not match the rules", i, id, rm["ruleIndex"])
		}
		if !levels[rm["level"].(string)] {
			t.Errorf("result %d: level %v", i, rm["level"])
		}
		locs, _ := rm["locations"].([]any)
		if len(locs) == 0 {
			t.Errorf("result %d has no location", i)
		}
		ids := map[float64]bool{}
		related, _ := rm["relatedLocations"].([]any)
		for _, l := range append(locs, related...) {
			pl := l.(map[string]any)["physicalLocation"].(map[string]any)
			al := pl["artifactLocation"].(map[string]any)
			if u, _ := al["uri"].(string); u == "" || strings.HasPrefix(u, "/") {
				t.Errorf("result %d: artifactLocation.uri %q is not a relative reference", i, u)
			}
			if sl, _ := pl["region"].(map[string]any)["startLine"].(float64); sl < 1 {
				t.Errorf("result %d: region.startLine %v", i, sl)
			}
			if id, ok := l.(map[string]any)["id"].(float64); ok {
				if ids[id] || id < 0 {
					t.Errorf("result %d: location id %v repeated or negative", i, id)
				}
				ids[id] = true
			}
		}
	}
	if base, ok := run["originalUriBaseIds"].(map[string]any)["SRCROOT"].(map[string]any); !ok || !strings.HasSuffix(base["uri"].(string), "/") {
		t.Errorf("originalUriBaseIds.SRCROOT = %v", run["originalUriBaseIds"])
	}
}

func TestBadInput(t *testing.T) {
	root := t.TempDir()
	write := func(rel string, data []byte) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("src/server.ts", []byte(`server.tool("send_invoice", "Send", {}, async () => { await fetch(u, { method: "POST" }) })`+"\n"))
	write("src/blob.py", append([]byte("x = 1\n\x00\x01\x02"), make([]byte, 64)...))
	write("src/huge.go", bytes.Repeat([]byte("// filler line for a huge file\n"), 200))
	write("a/b/c/d/e/deep.rb", []byte("class DeepTool < MCP::Tool\nend\n"))
	if err := os.Symlink("..", filepath.Join(root, "src", "loop")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(root, "a", "back-to-root")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("missing.ts", filepath.Join(root, "src", "dangling.ts")); err != nil {
		t.Fatal(err)
	}
	asRoot := os.Geteuid() == 0
	if !asRoot {
		write("src/locked.ts", []byte("server.tool(\"x\")\n"))
		if err := os.Chmod(filepath.Join(root, "src", "locked.ts"), 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(filepath.Join(root, "src", "locked.ts"), 0o644) })
	}

	rep := scanDir(t, root, Options{MaxFileBytes: 4096, MaxDepth: 3})
	got := map[string]string{}
	for _, s := range rep.Skipped {
		got[s.Path] = s.Reason
	}
	want := map[string]string{
		"src/blob.py":     SkipBinary,
		"src/huge.go":     SkipTooLarge,
		"src/loop":        SkipSymlinkLoop,
		"a/back-to-root":  SkipSymlinkLoop,
		"src/dangling.ts": SkipUnreadable,
		"a/b/c/d":         SkipTooDeep,
	}
	if !asRoot {
		want["src/locked.ts"] = SkipUnreadable
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("skipped %v\nwant    %v", got, want)
	}
	for reason, n := range map[string]int{SkipBinary: 1, SkipTooLarge: 1, SkipSymlinkLoop: 2, SkipTooDeep: 1} {
		if rep.Files.SkippedBad[reason] != n {
			t.Errorf("count %s = %d, want %d", reason, rep.Files.SkippedBad[reason], n)
		}
	}
	if rep.Files.Scanned != 1 || len(rep.Candidates) != 1 || rep.Candidates[0].Name != "send_invoice" {
		t.Errorf("scanned %d, candidates %v", rep.Files.Scanned, toolNames(rep.Candidates))
	}
	var text bytes.Buffer
	if err := WriteText(&text, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"src/blob.py", "src/loop", "too_large"} {
		if !strings.Contains(text.String(), p) {
			t.Errorf("text report does not mention %s", p)
		}
	}
}

func TestBadRoot(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f.ts")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(t.TempDir(), "missing"), file} {
		if _, err := Scan(context.Background(), p, Options{}); !errors.Is(err, ErrBadRoot) {
			t.Errorf("Scan(%s) error = %v, want ErrBadRoot", p, err)
		}
	}
}

func TestSkipRules(t *testing.T) {
	root := t.TempDir()
	tool := []byte(`server.tool("delete_everything", "x", {}, async () => {})` + "\n")
	for _, rel := range []string{"node_modules/pkg/index.js", "vendor/x/x.go", "dist/index.js", ".hidden/x.ts",
		"tests/x.ts", "src/x.test.ts", "src/x_test.go", "fixtures/x.py", "src/gen.ts"} {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := tool
		if rel == "src/gen.ts" {
			data = append([]byte("// Code generated by protoc. DO NOT EDIT.\n"), tool...)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := scanDir(t, root, Options{})
	if n := len(rep.Candidates) + len(rep.Others); n != 0 {
		t.Errorf("found %d tools in skipped places: %v", n, toolNames(rep.Candidates))
	}
	if rep.Files.SkippedByRule < 7 {
		t.Errorf("skipped by rule = %d, want at least 7", rep.Files.SkippedByRule)
	}
}

// TestNotDeclarations covers code that mentions tools without declaring one: calls in
// trailing comments, helpers whose names end in "tool", tool lookups, and a wrapper's own
// parameter (reported as unresolved, not guessed).
func TestNotDeclarations(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{
		"a.go": "package a\n\nfunc f() {\n\tcontinue // AddTool(mcp.NewTool(\"ghost\"), h)\n}\n",
		"b.rb": "PgBin.tool(\"initdb\")\nallow_missing_tool(\"pg_ctl\")\n",
		"c.ts": "const t = client.getTool(\"create_order\");\nallowMissingTool(\"x\");\n",
		"d.ts": "function defineTool(name: string) {\n  server.tool(name, \"d\", {}, async () => ({}));\n}\n",
		"e.py": "def call(name):\n    return registry.find_tool(\"delete_all\")\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep := scanDir(t, root, Options{})
	if n := len(rep.Candidates) + len(rep.Others); n != 0 {
		t.Errorf("declared %d tools: %v %v", n, toolNames(rep.Candidates), toolNames(rep.Others))
	}
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].File != "d.ts" {
		t.Errorf("unresolved = %v, want the wrapper's server.tool(name, ...) in d.ts", rep.Unresolved)
	}
}

// TestSARIFEveryResultHasALocation: with --run, a tool known only from the server's list has
// no file; its result (a candidate, a disagreement) must not go out without a location,
// which makes GitHub code scanning reject the whole log ("expected at least one
// location"). It is listed in run.properties.resultsWithoutLocation instead.
func TestSARIFEveryResultHasALocation(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"srv.ts": "server.tool(\"send_invoice\", \"Send an invoice\", {}, async () => { await fetch(u, { method: \"POST\" }) });\n",
	})
	yes, no := true, false
	rep := scanDir(t, dir, Options{RunCommand: []string{"srv"}, Published: []PublishedTool{
		{Name: "send_invoice", Annotations: &Annotations{ReadOnlyHint: &yes}},
		{Name: "wipe_all", Annotations: &Annotations{DestructiveHint: &yes, ReadOnlyHint: &no}},
		{Name: "delete_record", Annotations: &Annotations{ReadOnlyHint: &yes}},
	}})
	var buf bytes.Buffer
	if err := WriteSARIF(&buf, rep, "test"); err != nil {
		t.Fatal(err)
	}
	var log map[string]any
	if err := json.Unmarshal(buf.Bytes(), &log); err != nil {
		t.Fatal(err)
	}
	run := log["runs"].([]any)[0].(map[string]any)
	results, _ := run["results"].([]any)
	checkSARIF(t, log, len(results))
	var away []string
	unlocated, _ := run["properties"].(map[string]any)["resultsWithoutLocation"].([]any)
	for _, u := range unlocated {
		away = append(away, u.(map[string]any)["tool"].(string))
	}
	if !slices.Contains(away, "wipe_all") {
		t.Errorf("the published-only candidate wipe_all is not in resultsWithoutLocation: %v", away)
	}
	if len(results) == 0 {
		t.Errorf("no results: send_invoice is in the code")
	}
}

// TestSRCROOTURI: SARIF's SRCROOT is a file: URI with an empty host, also for a Windows path
// (before, C:/src became file://C:/src/, a URI whose host is "C:").
func TestSRCROOTURI(t *testing.T) {
	for path, want := range map[string]string{
		"C:/Users/me/my repo": "file:///C:/Users/me/my%20repo/",
		"/home/me/a#b%c":      "file:///home/me/a%23b%25c/",
		"/":                   "file:///",
	} {
		got := dirURI(path)
		u, err := url.Parse(got)
		if got != want || err != nil || u.Host != "" {
			t.Errorf("dirURI(%q) = %q (host %q, %v), want %q", path, got, u.Host, err, want)
		}
	}
}

// TestPythonBlockOutlivesADedentedString: a Python tool's body goes on past a triple-quoted
// string whose lines start at column 0 (SQL, a prompt, markdown kept free of indentation);
// the body ended at the string's first such line, and the write after it was no longer the
// tool's, so a tool that inserts into a table was listed as no candidate.
func TestPythonBlockOutlivesADedentedString(t *testing.T) {
	dir := t.TempDir()
	code := strings.Join([]string{
		`from mcp.server.fastmcp import FastMCP`,
		`mcp = FastMCP("ledger")`,
		``,
		`@mcp.tool()`,
		`async def ledger_entry(account: str, cents: int) -> str:`,
		`    """Ledger entry for an account."""`,
		`    query = """`,
		`INSERT INTO ledger (account, cents)`,
		`VALUES (?, ?)`,
		`"""`,
		`    await db.execute(query, (account, cents))`,
		`    return "ok"`,
		``,
		`def helper():`,
		`    requests.post("https://x/other")`,
	}, "\n")
	wantWriteInBlock(t, dir, "server.py", code, "ledger_entry", "server.py:4-12", 8)
}

// wantWriteInBlock scans code, written to file in dir, and fails unless tool's block is block
// and the tool is a candidate by one write, on line line.
func wantWriteInBlock(t *testing.T, dir, file, code, tool, block string, line int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, file), []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := scanDir(t, dir, Options{})
	got, ok := findTool(rep, tool)
	if !ok {
		t.Fatalf("%s not found: %+v", tool, rep)
	}
	if got.Block != block || !got.Candidate || len(got.Evidence) != 1 || got.Evidence[0].Line != line {
		t.Fatalf("%s: block %s, candidate %v, evidence %v (%s); want block %s, a candidate with its write on line %d", tool, got.Block, got.Candidate, got.Evidence, got.Reason, block, line)
	}
}

// TestPythonBlockOutlivesAColumnZeroComment: a comment line at column 0 inside a Python
// function (a TODO, code commented out by an editor) does not end its body, as it does not
// for Python; the body ended there and the write after it was not the tool's.
func TestPythonBlockOutlivesAColumnZeroComment(t *testing.T) {
	dir := t.TempDir()
	code := strings.Join([]string{
		`@mcp.tool()`,
		`def ledger_entry(account: str) -> str:`,
		`    """Ledger entry."""`,
		`    row = (account,)`,
		`# TODO: batch these`,
		`    db.execute("INSERT INTO ledger (account) VALUES (?)", row)`,
		`    return "ok"`,
		`# the end`,
		``,
		`def helper():`,
		`    requests.post("https://x/other")`,
	}, "\n")
	wantWriteInBlock(t, dir, "server.py", code, "ledger_entry", "server.py:1-7", 6)
}

// TestJSRegexWithABacktickIsNotATemplate: a regular expression literal that holds a backtick
// (escaping markdown: /`/g) is not the start of a template literal; it was read as one that ran
// to the next backtick, in the next tool, and the first tool's block took in the next tool's
// write: a tool that writes nothing was listed as a candidate with another's evidence.
func TestJSRegexWithABacktickIsNotATemplate(t *testing.T) {
	dir := t.TempDir()
	code := strings.Join([]string{
		`server.tool("note_markdown", "Markdown of a note", { text: z.string() }, async ({ text }) => {`,
		"  const safe = text.replace(/`/g, \"'\").replace(/[/]/g, \"\");",
		`  return { content: [{ type: "text", text: safe }] };`,
		`});`,
		``,
		`server.tool("inventory", "Inventory", {}, async () => {`,
		`  await fetch("https://x/inventory", { method: "DELETE" });`,
		"  return { content: [{ type: \"text\", text: `done` }] };",
		`});`,
		``,
		`const half = total / 2; const third = (total) / 3;`,
	}, "\n")
	if err := os.WriteFile(filepath.Join(dir, "server.ts"), []byte(code), 0o600); err != nil {
		t.Fatal(err)
	}
	rep := scanDir(t, dir, Options{})
	md, ok := findTool(rep, "note_markdown")
	inv, ok2 := findTool(rep, "inventory")
	if !ok || !ok2 {
		t.Fatalf("tools found: %v %v", toolNames(rep.Candidates), toolNames(rep.Others))
	}
	if md.Block != "server.ts:1-4" || md.Candidate || len(md.Evidence) != 0 {
		t.Errorf("note_markdown: block %s, candidate %v, evidence %v (%s); want block server.ts:1-4, no candidate, no evidence", md.Block, md.Candidate, md.Evidence, md.Reason)
	}
	if inv.Block != "server.ts:6-9" || !inv.Candidate || len(inv.Evidence) != 1 || inv.Evidence[0].Line != 7 {
		t.Errorf("inventory: block %s, candidate %v, evidence %v (%s)", inv.Block, inv.Candidate, inv.Evidence, inv.Reason)
	}
}
