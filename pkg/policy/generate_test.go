package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/scan"
)

// TestGenerateFromAnnotations: the generated file parses, validates under the schema, and
// each tool's entry follows from its annotations.
func TestGenerateFromAnnotations(t *testing.T) {
	page2 := `{"tools":[` +
		`{"name":"refund","annotations":{"idempotentHint":true,"destructiveHint":false}},` +
		`{"name":"true","description":"a tool named like a YAML boolean"},` +
		`{"name":"charge_*x","description":"glob characters"},` +
		`{"name":"charge","description":"listed twice, read-only in one listing only: fenced","annotations":{"readOnlyHint":true}}]}`
	var buf bytes.Buffer
	err := Generate(&buf, []json.RawMessage{json.RawMessage(mcptest.ToolsList), json.RawMessage(page2)}, Source{Server: "mcptest --flag"})
	if err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	p, err := Parse("generated.yaml", buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := validate(t, compileSchema(t), buf.Bytes()); err != nil {
		t.Fatalf("schema: %v\n%s", err, out)
	}
	want := map[string]struct{ fence, rerun bool }{
		"charge": {true, false}, "balance": {false, false}, "progress": {false, false}, "slow": {true, false},
		"refund": {true, true}, "true": {true, false},
	}
	for tool, w := range want {
		e := p.Entry(tool)
		if e == nil || e.Pattern != tool || e.Fence == nil || *e.Fence != w.fence || (e.RerunSafe != nil && *e.RerunSafe) != w.rerun {
			t.Errorf("%s: entry %+v, want fence %v rerun_safe %v", tool, e, w.fence, w.rerun)
		}
	}
	for _, s := range []string{
		"#   mcptest --flag",
		`Argument "idempotency_key" looks like an idempotency key`,
		"destructiveHint (true, or absent: MCP's default)",
		"readOnlyHint: the server says this tool only reads",
		"idempotentHint: a repeat with the same arguments has no further effect",
		"No annotations: MCP's defaults say it may write",
		`#   "ünïcode ☃"`,
		`#   "charge_*x"`,
		"\n  \"true\":\n",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("the generated policy lacks %q:\n%s", s, out)
		}
	}
}

// TestGenerateWithScanEvidence: scan findings become comments, however hostile their text,
// and the file still parses.
func TestGenerateWithScanEvidence(t *testing.T) {
	rep := &scan.Report{
		Candidates: []scan.Tool{
			{Name: "charge", File: "src/charge.ts", Line: 12, Reason: "money words; a POST in its own code", Evidence: []scan.Site{
				{File: "src/charge.ts", Line: 20, Kind: "http", Text: "await api.post('/charges', body)\nversion: 2\r\x1b[31m"},
			}, Guards: []scan.Site{{File: "src/charge.ts", Line: 18, Kind: "idempotency key"}}},
			{Name: "unlisted_delete", File: "src/x.py", Line: 3, Candidate: true, Reason: "deletes rows"},
		},
		Others: []scan.Tool{{Name: "balance", File: "src/b.ts", Line: 4, Reason: "reads", Evidence: []scan.Site{{File: "src/b.ts", Line: 9, Kind: "sql", Text: "UPDATE hits SET n = n + 1"}}}},
	}
	var buf bytes.Buffer
	if err := Generate(&buf, []json.RawMessage{json.RawMessage(mcptest.ToolsList)}, Source{Server: "s", Scan: rep, ScanPath: "./src"}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if _, err := Parse("generated.yaml", buf.Bytes()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, s := range []string{
		"# scan: src/charge.ts:12: money words; a POST in its own code",
		"#   write http at src/charge.ts:20: await api.post('/charges', body) version: 2  [31m",
		"#   guard idempotency key at src/charge.ts:18",
		"# scan: it is annotated read-only, yet its code has write sites; consider fence: true.",
		"#   unlisted_delete (src/x.py:3): deletes rows",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("the generated policy lacks %q:\n%s", s, out)
		}
	}
	if strings.ContainsAny(out, "\r\x1b") {
		t.Errorf("control characters reached the file:\n%q", out)
	}
}

// TestGenerateForManyTools: a server that lists thousands of tools (an OpenAPI bridge) gets a
// file that Load accepts as written: when the commented file would pass MaxFileSize, the
// per-tool reasoning is left out (and the file says so), not the file refused at its first
// check. Each tool keeps its entry.
func TestGenerateForManyTools(t *testing.T) {
	var tools []string
	const n = 6000
	for i := range n {
		tools = append(tools, fmt.Sprintf(`{"name":"operation_%d","description":%q,"annotations":{"idempotentHint":%v}}`, i, strings.Repeat("Calls the API. ", 10), i%2 == 0))
	}
	page := json.RawMessage(`{"tools":[` + strings.Join(tools, ",") + `]}`)
	var buf bytes.Buffer
	if err := Generate(&buf, []json.RawMessage{page}, Source{Server: "openapi-bridge"}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatalf("the generated file (%d bytes) is refused: %.300v", buf.Len(), err)
	}
	if len(p.Tools) != n || !strings.Contains(buf.String(), "per-tool reasoning is left out") {
		t.Fatalf("%d entries of %d tools; the file does not say what it left out", len(p.Tools), n)
	}
	for _, i := range []int{0, 1, n - 1} {
		e := p.Entry(fmt.Sprintf("operation_%d", i))
		if e == nil || e.Fence == nil || !*e.Fence || (e.RerunSafe != nil && *e.RerunSafe) != (i%2 == 0) {
			t.Fatalf("operation_%d: %+v", i, e)
		}
	}
}

// TestGenerateHostileNamesReadBack: whatever a server names its tools and however it
// describes them, the generated file reads back (Parse) to exactly the names written as keys,
// and no description, name or server command adds a setting: names YAML would read as
// something else (null, numbers, booleans of either YAML version, indicators), Unicode format
// characters, 100,000-character names; descriptions with line breaks of every kind followed by
// keys, and with format characters (which Parse refuses written as themselves).
func TestGenerateHostileNamesReadBack(t *testing.T) {
	names := []string{"a:b", `a"b`, "a'b", "-x", "x-", ".x", "1e3", "0x10", "0o7", "nan", "NaN", ".inf", "~", "~x", "%x", "@x", "`x",
		"!x", "&x", "|x", ">x", "<<", "=", "é", "\ufeffx", "x\u200bx", "x\u00adx", "\U0001F600", "x\u3164", "x\u034fx", "x\ufe0f", "\u2714\ufe0f", "a/b", "a,b", "a#b", "#", "-", "---", "...",
		"true", "True", "Yes", "off", "NULL", "Null", "y", "N", "x\ufffd", "a\\b", "{x}", "[x]", "x?", "*", strings.Repeat("l", 100000)}
	var tools []map[string]any
	for _, n := range names {
		tools = append(tools, map[string]any{"name": n,
			"description": "d\u2028ledger: postgres://u:p@h/d\u202e\u200b\nfence_reads: true\r\n" + n + ": {}\u0085scope: x"})
	}
	page, _ := json.Marshal(map[string]any{"tools": tools})
	var buf bytes.Buffer
	if err := Generate(&buf, []json.RawMessage{page}, Source{Server: "srv\u2066\nledger: /tmp/x\r\nscope: y"}); err != nil {
		t.Fatal(err)
	}
	p, err := Parse("generated.yaml", buf.Bytes())
	if err != nil {
		t.Fatalf("%.2000v", err)
	}
	if p.Ledger != "" || p.Scope != "" || p.FenceReads != nil {
		t.Fatalf("a description or the server command set something: %+v", p)
	}
	got := map[string]bool{}
	for _, e := range p.Tools {
		got[e.Pattern] = true
	}
	for _, n := range names {
		writable := checkPattern(n) == nil && !strings.ContainsAny(n, "*?")
		if got[n] != writable {
			t.Errorf("tool %.40q: read back %v, writable %v", n, got[n], writable)
		}
	}
	if len(p.Tools) != len(got) {
		t.Errorf("%d entries for %d names", len(p.Tools), len(got))
	}
}

// TestGenerateReadsHintsAsSpelled: a hint spelled otherwise ("ReadOnlyHint", "Annotations")
// is no hint to MCP's SDKs, nor to wrap, which fences such a tool. encoding/json took it for
// readOnlyHint, so policy init wrote fence: false for it, and the policy unfenced a tool that
// no client reads as read-only. A hint spelled so with an escape is the hint.
func TestGenerateReadsHintsAsSpelled(t *testing.T) {
	page := `{"tools":[` +
		`{"name":"charge","annotations":{"ReadOnlyHint":true}},` +
		`{"name":"refund","Annotations":{"readOnlyHint":true}},` +
		`{"name":"void","annotations":{"readOnly\u0048int":true}},` +
		`{"name":"send","annotations":{"IdempotentHint":true}}]}`
	var buf bytes.Buffer
	if err := Generate(&buf, []json.RawMessage{json.RawMessage(page)}, Source{Server: "s"}); err != nil {
		t.Fatal(err)
	}
	p, err := Parse("generated.yaml", buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for tool, w := range map[string]struct{ fence, rerun bool }{
		"charge": {true, false}, "refund": {true, false}, "void": {false, false}, "send": {true, false},
	} {
		e := p.Entry(tool)
		if e == nil || e.Fence == nil || *e.Fence != w.fence || (e.RerunSafe != nil && *e.RerunSafe) != w.rerun {
			t.Errorf("%s: entry %+v, want fence %v rerun_safe %v\n%s", tool, e, w.fence, w.rerun, buf.String())
		}
	}
}

// TestGenerateOnlyUnwritableNames: a server whose every tool has a name no policy key can hold
// (a control character, a glob character) got "tools:" with nothing under it, which is null:
// `effectfence policy check` refused the file policy init had just written and told the user
// to check. Now it is an empty mapping, and the names are listed as comments.
func TestGenerateOnlyUnwritableNames(t *testing.T) {
	page := json.RawMessage(`{"tools":[{"name":"t\u001b]0;x\u0007"},{"name":"charge_*"},{"name":"a b"}]}`)
	var buf bytes.Buffer
	if err := Generate(&buf, []json.RawMessage{page}, Source{Server: "srv"}); err != nil {
		t.Fatal(err)
	}
	p, err := Parse("generated.yaml", buf.Bytes())
	if err != nil {
		t.Fatalf("the generated policy does not parse: %v\n%s", err, buf.String())
	}
	if err := validate(t, compileSchema(t), buf.Bytes()); err != nil {
		t.Fatalf("schema: %v\n%s", err, buf.String())
	}
	if len(p.Tools) != 0 || !strings.Contains(buf.String(), `#   "charge_*"`) || !strings.Contains(buf.String(), `#   "a b"`) {
		t.Fatalf("want no entries and each name as a comment: %+v\n%s", p.Tools, buf.String())
	}
}

// TestGenerateToolListedTwice: a tool the server lists twice (on one page or on two) is
// written fence: false only when every entry says readOnlyHint, as wrap passes it through only
// then. The first entry counted alone, so a tool listed read-only first and as writing after
// got fence: false, and the policy unfenced a tool the server also says may write.
func TestGenerateToolListedTwice(t *testing.T) {
	const reads, writes = `{"name":"wipe","annotations":{"readOnlyHint":true}}`, `{"name":"wipe","annotations":{"destructiveHint":true}}`
	for _, c := range []struct {
		name  string
		pages []string
		fence bool
	}{
		{"one page, read-only first", []string{`{"tools":[` + reads + `,` + writes + `]}`}, true},
		{"one page, writing first", []string{`{"tools":[` + writes + `,` + reads + `]}`}, true},
		{"two pages, read-only first", []string{`{"tools":[` + reads + `]}`, `{"tools":[` + writes + `]}`}, true},
		{"read-only twice", []string{`{"tools":[` + reads + `,` + reads + `]}`}, false},
	} {
		var pages []json.RawMessage
		for _, p := range c.pages {
			pages = append(pages, json.RawMessage(p))
		}
		var buf bytes.Buffer
		if err := Generate(&buf, pages, Source{Server: "s"}); err != nil {
			t.Fatal(err)
		}
		p, err := Parse("generated.yaml", buf.Bytes())
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, buf.String())
		}
		if e := p.Entry("wipe"); e == nil || e.Fence == nil || *e.Fence != c.fence {
			t.Errorf("%s: entry %+v, want fence %v\n%s", c.name, e, c.fence, buf.String())
		}
	}
}

// TestGenerateOneOverlongName: a server that lists one tool with a megabyte-long name beside
// ordinary ones gets a policy for the ordinary ones, the long name listed shortened in a
// comment. Before, the file could not be kept under 1 MiB and policy init refused the whole
// server: "the server lists so many tools ...", for three tools.
func TestGenerateOneOverlongName(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	page := `{"tools":[{"name":"charge"},{"name":"` + long + `"},{"name":"balance","annotations":{"readOnlyHint":true}}]}`
	var buf bytes.Buffer
	if err := Generate(&buf, []json.RawMessage{json.RawMessage(page)}, Source{Server: "srv"}); err != nil {
		t.Fatal(err)
	}
	p, err := Parse("generated.yaml", buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%.2000s", err, buf.String())
	}
	if e := p.Entry("charge"); e == nil || e.Pattern != "charge" || e.Fence == nil || !*e.Fence {
		t.Errorf("charge: entry %+v, want fence: true", e)
	}
	if e := p.Entry("balance"); e == nil || e.Pattern != "balance" || e.Fence == nil || *e.Fence {
		t.Errorf("balance: entry %+v, want fence: false", e)
	}
	if !strings.Contains(buf.String(), "… (1048576 bytes)\n") || buf.Len() > 16<<10 {
		t.Errorf("the long name is not listed shortened (%d bytes):\n%.3000s", buf.Len(), buf.String())
	}
}
