package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

const good = `version: 1
scope: payments-prod
ledger: postgres://effectfence@db.internal/ledger
fence_reads: false
defaults:
  replay_window: 1d
  wait: 45s
  redact: [card.number]
  elicit: true
tools:
  charge_card:
    key: [order_id]
    ignore: [meta.timestamp, meta.trace_id]
    replay_window: 7d
    redact: [card.cvc]
    result: hash
    wait: 2m
    elicit: false
  "charge_*":
    rerun_safe: true
  "list_*":
    fence: false
  get_balance:
    fence: true
    ignore: []
on_unknown:
  command: ["notify-oncall", "--team", "payments"]
  retries: 2
  timeout: 1m30s
`

func TestParseGood(t *testing.T) {
	p, err := Parse("good.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if p.Scope != "payments-prod" || p.Ledger != "postgres://effectfence@db.internal/ledger" || p.FenceReads == nil || *p.FenceReads {
		t.Fatalf("server settings: %+v", p)
	}
	if p.Defaults.ReplayWindow != 24*time.Hour || p.Defaults.Wait != 45*time.Second {
		t.Fatalf("defaults: %+v", p.Defaults)
	}
	if h := p.OnUnknown; h == nil || strings.Join(h.Command, " ") != "notify-oncall --team payments" || h.Retries != 2 || h.Timeout != 90*time.Second {
		t.Fatalf("on_unknown: %+v", h)
	}
	c := p.For("charge_card")
	if len(c.Key) != 1 || c.Key[0].String() != "order_id" || len(c.Ignore) != 2 || c.Ignore[1].String() != "meta.trace_id" ||
		c.ReplayWindow != 7*24*time.Hour || c.Result != fence.KeepHash || c.Wait != 2*time.Minute || *c.Elicit ||
		strings.Join(c.Redact, ",") != "card.number,card.cvc" || c.RerunSafe != nil {
		t.Fatalf("charge_card (exact entry beats the glob, defaults fill in, redact adds up): %+v", c)
	}
	r := p.For("charge_refund")
	if r.RerunSafe == nil || !*r.RerunSafe || r.ReplayWindow != 24*time.Hour || r.Wait != 45*time.Second || strings.Join(r.Redact, ",") != "card.number" {
		t.Fatalf("charge_refund (glob, then defaults): %+v", r)
	}
	if l := p.For("list_things"); l.Fence == nil || *l.Fence {
		t.Fatalf("list_things: %+v", l)
	}
	if g := p.For("get_balance"); g.Fence == nil || !*g.Fence || g.Ignore == nil || len(g.Ignore) != 0 {
		t.Fatalf("get_balance: fence true and an explicit empty ignore: %+v", g)
	}
	if o := p.For("other"); o.Fence != nil || o.ReplayWindow != 24*time.Hour {
		t.Fatalf("a tool no entry names gets the defaults: %+v", o)
	}
	if s := p.Summary(); s != `good.yaml: ok: 2 tools by name, 2 globs, scope "payments-prod", ledger set, on_unknown hook` {
		t.Fatalf("summary %q", s)
	}
}

func TestGlobSpecificity(t *testing.T) {
	p, err := Parse("g.yaml", []byte("version: 1\ntools:\n  \"*\": {wait: 1s}\n  \"charge_*\": {wait: 2s}\n  \"charge_card_*\": {wait: 3s}\n  \"charge_?ard\": {wait: 4s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for tool, want := range map[string]time.Duration{"x": time.Second, "charge_x": 2 * time.Second, "charge_card_eu": 3 * time.Second, "charge_card": 4 * time.Second, "charge_": 2 * time.Second} {
		if got := p.For(tool).Wait; got != want {
			t.Errorf("%s: wait %v, want %v", tool, got, want)
		}
	}
}

func TestIntersect(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"a_*", "*_b", true}, {"a*", "b*", false}, {"*x", "*y", false}, {"a?c", "ab*", true},
		{"a?c", "abd", false}, {"*", "", true}, {"a*b*c", "*bc", true}, {"abc", "abc", true}, {"ab", "abc", false},
		{"charge_*", "*_card", true}, {"x*y", "x*z", false},
	}
	for _, c := range cases {
		if got := intersect(c.a, c.b); got != c.want {
			t.Errorf("intersect(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := intersect(c.b, c.a); got != c.want {
			t.Errorf("intersect(%q, %q) = %v, want %v", c.b, c.a, got, c.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{"30s": 30 * time.Second, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "1h30m": 90 * time.Minute} {
		if d, err := ParseDuration(s); err != nil || d != want {
			t.Errorf("%s: %v %v", s, d, err)
		}
	}
	for _, s := range []string{"", "d", "1.5d", "-1d", "1d-1h", "30", "soon", "1dd", "99999d", "+1h"} {
		if d, err := ParseDuration(s); err == nil {
			t.Errorf("%q parsed as %v", s, d)
		}
	}
}

// TestParseBad: every kind of bad file, each error at its exact line and column.
func TestParseBad(t *testing.T) {
	cases := []struct {
		name, src string
		want      []string // file:line:col: message fragments, in order
	}{
		{"empty", "", []string{"bad.yaml: the file is empty"}},
		{"comment only", "# nothing\n", []string{"bad.yaml: the file is empty"}},
		{"no version", "scope: x\n", []string{"bad.yaml:1:1: the policy does not say `version: 1`"}},
		{"version 2", "version: 2\n", []string{"bad.yaml:1:10: version must be 1"}},
		{"not a mapping", "- a\n", []string{"bad.yaml:1:1: the policy must be a mapping of keys to values, not a list"}},
		{"syntax", "version: 1\ntools: [a\n", []string{"bad.yaml:2:"}},
		{"unknown top key", "version: 1\nfence_read: true\n", []string{`bad.yaml:2:1: unknown key "fence_read" in the policy; known keys: version, scope`}},
		{"unknown tool key", "version: 1\ntools:\n  charge:\n    keys: [a]\n", []string{`bad.yaml:4:5: unknown key "keys" in tool "charge"`}},
		{"unknown hook key", "version: 1\non_unknown:\n  command: [x]\n  retry: 1\n", []string{`bad.yaml:4:3: unknown key "retry" in on_unknown`}},
		{"key in defaults", "version: 1\ndefaults:\n  key: [a]\n", []string{`bad.yaml:3:3: "key" cannot be in defaults`}},
		{"fence in defaults", "version: 1\ndefaults:\n  fence: true\n", []string{`bad.yaml:3:3: "fence" cannot be in defaults`}},
		{"bad bool", "version: 1\ntools:\n  c:\n    fence: yes\n", []string{"bad.yaml:4:12: fence must be true or false, not a string"}},
		{"quoted bool", "version: 1\nfence_reads: \"true\"\n", []string{"bad.yaml:2:14: fence_reads must be true or false, not a string"}},
		{"bad type scope", "version: 1\nscope: 12\n", []string{"bad.yaml:2:8: scope must be a string, not a number"}},
		{"tool not mapping", "version: 1\ntools:\n  charge: true\n", []string{`bad.yaml:3:11: tool "charge" must be a mapping of keys to values, not true/false`}},
		{"tool null", "version: 1\ntools:\n  charge:\n", []string{`bad.yaml:3:`, `tool "charge" must be a mapping of keys to values, not an empty value`}},
		{"bad duration", "version: 1\ntools:\n  c:\n    replay_window: 10 minutes\n", []string{`bad.yaml:4:20: replay_window: "10 minutes" is not a duration`}},
		{"number duration", "version: 1\ndefaults:\n  wait: 30\n", []string{"bad.yaml:3:9: wait must be a duration such as 30s"}},
		{"duration too short", "version: 1\ndefaults:\n  replay_window: 500ms\n", []string{"bad.yaml:3:18: replay_window is 500ms; want from 1s to 366d"}},
		{"duration too long", "version: 1\ntools:\n  c:\n    wait: 31d\n", []string{"bad.yaml:4:11: wait is 31d; want from 1ms to 30d"}},
		{"negative duration", "version: 1\ntools:\n  c:\n    wait: -1s\n", []string{`bad.yaml:4:11: wait: "-1s" is not a duration`}},
		{"bad path", "version: 1\ntools:\n  c:\n    key: [order_id, a..b]\n", []string{`bad.yaml:4:21: key: path "a..b" has an empty segment`}},
		{"empty key", "version: 1\ntools:\n  c:\n    key: []\n", []string{"bad.yaml:4:10: key is an empty list"}},
		{"key not list", "version: 1\ntools:\n  c:\n    key: order_id\n", []string{"bad.yaml:4:10: key must be a list such as [order_id, customer.id], not a string"}},
		{"bad redact", "version: 1\ntools:\n  c:\n    redact: [card., x]\n", []string{"bad.yaml:4:14: redact: "}},
		{"bad result", "version: 1\ntools:\n  c:\n    result: full\n", []string{`bad.yaml:4:13: result is "full"; want keep`}},
		{"bad glob", "version: 1\ntools:\n  \"charge_[ab]\":\n    wait: 1s\n", []string{`bad.yaml:3:3: tool "charge_[ab]": bad glob`}},
		{"double star", "version: 1\ntools:\n  \"a**\": {wait: 1s}\n", []string{`bad.yaml:3:3: tool "a**": bad glob: ** means`}},
		{"space in name", "version: 1\ntools:\n  \"a b\": {wait: 1s}\n", []string{`bad.yaml:3:3: tool "a b": a tool name or glob cannot hold white space`}},
		{"duplicate tool", "version: 1\ntools:\n  charge:\n    wait: 1s\n  charge:\n    wait: 2s\n", []string{`bad.yaml:5:3: "charge" is given twice in tools (first at line 3, column 3)`}},
		{"duplicate setting", "version: 1\ntools:\n  c:\n    wait: 1s\n    wait: 2s\n", []string{`bad.yaml:5:5: "wait" is given twice in tool "c" (first at line 4, column 5)`}},
		{"ambiguous globs", "version: 1\ntools:\n  \"a_*\": {wait: 1s}\n  \"*_b\": {wait: 2s}\n", []string{`bad.yaml:4:3: globs "*_b" and "a_*" (line 3) can match the same tool and are equally specific`}},
		{"key field ignored", "version: 1\ntools:\n  c:\n    ignore: [meta]\n    key: [meta.order]\n", []string{`bad.yaml:5:5: tool "c": key field "meta.order" is ignored (ignore "meta")`}},
		{"key field ignored by defaults", "version: 1\ntools:\n  \"c*\":\n    key: [order]\n  d:\n    key: [order]\n    ignore: []\ndefaults:\n  ignore: [order]\n", []string{`bad.yaml:3:3: tool "c*": key field "order" is ignored (ignore "order"): `, "(in defaults)"}},
		{"pass with settings", "version: 1\ntools:\n  c:\n    fence: false\n    key: [a]\n", []string{`bad.yaml:5:5: tool "c" says fence: false (calls pass through unfenced), so "key" has no effect`}},
		{"hook both", "version: 1\non_unknown:\n  command: [x]\n  url: https://h/p\n", []string{"bad.yaml:4:3: on_unknown takes command or url, not both"}},
		{"hook neither", "version: 1\non_unknown:\n  retries: 1\n", []string{"bad.yaml:3:3: on_unknown needs command"}},
		{"hook http", "version: 1\non_unknown:\n  url: http://pager.example.com/x\n", []string{"bad.yaml:3:8: url: http://pager.example.com/…: plain http only to this machine"}},
		{"hook port", "version: 1\non_unknown:\n  url: http://localhost:99999/x\n", []string{`bad.yaml:3:8: url: http://localhost:99999/…: port "99999"; want a number from 1 to 65535`}},
		{"hook retries", "version: 1\non_unknown:\n  command: [x]\n  retries: 11\n", []string{"bad.yaml:4:12: retries must be a whole number from 0 to 10"}},
		{"hook empty command", "version: 1\non_unknown:\n  command: []\n", []string{"bad.yaml:3:12: command must name a program"}},
		{"hook timeout", "version: 1\non_unknown:\n  command: [x]\n  timeout: 1h\n", []string{"bad.yaml:4:12: timeout is 1h; want from 1s to 10m0s"}},
		{"ledger password", "version: 1\nledger: postgres://u:secret@h/db\n", []string{"bad.yaml:2:9: the ledger URL holds a password"}},
		{"ledger scheme", "version: 1\nledger: redis://h\n", []string{`bad.yaml:2:9: ledger "redis://h"`}},
		{"ledger NUL", "version: 1\nledger: \"a\\u0000b.db\"\n", []string{`bad.yaml:2:9: ledger "a\x00b.db": a NUL character`}},
		{"anchor", "version: 1\ndefaults: &d\n  wait: 1s\ntools:\n  c: *d\n", []string{"anchors and aliases are not supported"}},
		{"merge key", "version: 1\ntools:\n  c:\n    <<: {wait: 1s}\n", []string{"bad.yaml:4:5: merge keys (<<) are not supported"}},
		{"tag on a value", "version: 1\ntools:\n  c:\n    wait: !!str 1s\n", []string{"bad.yaml:4:11: YAML tags are not supported"}},
		{"tag on scope", "version: 1\nscope: !custom x\n", []string{"bad.yaml:2:8: YAML tags are not supported"}},
		{"two documents", "version: 1\n---\nversion: 1\n", []string{"bad.yaml:3:", "one YAML document"}},
		{"several errors", "version: 1\ntools:\n  c:\n    wait: x\n    result: y\nbogus: 1\n", []string{"bad.yaml:4:11: wait:", "bad.yaml:5:13: result is", `bad.yaml:6:1: unknown key "bogus"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("bad.yaml", []byte(c.src))
			if err == nil {
				t.Fatalf("accepted: %+v", p)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error is %T, want Errors", err)
			}
			got := err.Error()
			rest := got
			for _, w := range c.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("errors:\n%s\nwant (in order) %q", got, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// TestLoadLedgerRelativeToFile: a relative ledger path in a file is taken from the file's
// directory, so the policy means the same wherever wrap starts; other forms are kept.
func TestLoadLedgerRelativeToFile(t *testing.T) {
	dir := t.TempDir()
	for ledger, want := range map[string]string{
		"state/ledger.db":       filepath.Join(dir, "state", "ledger.db"),
		"/abs/ledger.db":        "/abs/ledger.db",
		"memory":                "memory",
		"postgres://u@h/db?x=1": "postgres://u@h/db?x=1",
	} {
		path := filepath.Join(dir, "p.yaml")
		if err := os.WriteFile(path, []byte("version: 1\nledger: "+ledger+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := Load(path)
		if err != nil {
			t.Errorf("ledger %q: %v", ledger, err)
		} else if p.Ledger != want {
			t.Errorf("ledger %q: got %q, want %q", ledger, p.Ledger, want)
		}
	}
	// A symlinked file (a Kubernetes ConfigMap mounts p.yaml -> ..data/p.yaml, ..data -> a
	// directory renamed on each update) takes the directory it is named in, not its target's:
	// the ledger must not move when the configuration is updated.
	target := filepath.Join(dir, "..2026_12_03", "p.yaml")
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(target, []byte("version: 1\nledger: ledger.db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "mounted.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Skip("no symlinks here:", err)
	}
	if p, err := Load(link); err != nil || p.Ledger != filepath.Join(filepath.Dir(link), "ledger.db") {
		t.Errorf("a symlinked policy: %v, ledger %q; want it beside the link", err, p.Ledger)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "cannot read the policy file") {
		t.Errorf("a missing file: %v", err)
	}
}

// TestLoadBoundsTheFile: a policy file over MaxFileSize is refused before it is parsed (the
// YAML parser holds about 300 bytes of memory per byte of a file: a 20 MB file of entries took
// 6 GB and minutes), and one of exactly MaxFileSize is read.
func TestLoadBoundsTheFile(t *testing.T) {
	dir := t.TempDir()
	for _, size := range []int{MaxFileSize, MaxFileSize + 1} {
		head := "version: 1\n"
		line := "# " + strings.Repeat("x", 77) + "\n"
		src := head + strings.Repeat(line, (size-len(head))/len(line))
		src += strings.Repeat("#", size-len(src))
		path := filepath.Join(dir, "p.yaml")
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(path)
		switch {
		case size <= MaxFileSize && err != nil:
			t.Errorf("a file of %d bytes: %v", size, err)
		case size > MaxFileSize && (err == nil || !strings.Contains(err.Error(), path+": the file is larger than 1 MiB")):
			t.Errorf("a file of %d bytes: %v; want it refused for its size", size, err)
		}
	}
}

// TestParseEncodingsAndDirectives: what YAML allows around a document is read as YAML reads
// it, and what a policy cannot hold is refused at its place with a message that names it: a
// byte-order mark is not part of the first key, bytes that are not UTF-8 are refused (YAML is
// Unicode; a tool name so written could never equal one an agent sends), a %YAML or %TAG
// directive is named as such (not as a policy that is not a mapping followed by a second
// document), and a block scalar (| or >) is the string it is.
func TestParseEncodingsAndDirectives(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"byte-order mark", "\ufeffversion: 1\nscope: s\n", ""},
		{"CRLF", "version: 1\r\nscope: s\r\n", ""},
		{"folded scalar", "version: 1\nscope: >-\n  s\n", ""},
		{"literal scalar with its newline", "version: 1\nscope: |\n  s\n", `bad.yaml:2:8: scope "s\n": want a non-empty name without control characters`},
		{"block scalar in a list", "version: 1\ntools:\n  c:\n    key:\n      - >-\n        order_id\n", ""},
		{"not UTF-8", "version: 1\nscope: caf\xe9\n", "bad.yaml:2:11: the file is not UTF-8 text"},
		{"not UTF-8 in a comment", "version: 1 # \xff\n", "bad.yaml:1:14: the file is not UTF-8 text"},
		{"%YAML directive", "%YAML 1.1\n---\nversion: 1\nscope: s\n", "bad.yaml:1:1: YAML directives"},
		{"%TAG directive", "%TAG !e! tag:example.com,2024:\n---\nversion: 1\nscope: s\n", "bad.yaml:1:1: YAML directives"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("bad.yaml", []byte(c.src))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want == "" && p.Scope != "s" && len(p.Tools) == 0:
				t.Fatalf("read as %+v", p)
			case c.want == "" && len(p.Tools) == 1 && (len(p.Tools[0].Key) != 1 || p.Tools[0].Key[0].String() != "order_id"):
				t.Fatalf("key read as %v", p.Tools[0].Key)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want) || strings.Contains(err.Error(), "\n")):
				t.Fatalf("got %v; want one error starting %q", err, c.want)
			}
		})
	}
}

// TestParseBoundsNesting: collections nested deeper than any policy needs are refused before
// the YAML parser sees them, at the line and column where the depth is passed. The parser's
// memory grows with the square of the depth: 500,000 '[' (or "- " on one line) in a 1 MiB
// file took more than 24 GB. Brackets and dashes inside quotes, comments and plain text do not
// count.
func TestParseBoundsNesting(t *testing.T) {
	const deep = 1000
	for _, c := range []struct{ name, src, want string }{
		{"flow sequences", "version: 1\ntools:\n  x:\n    key: " + strings.Repeat("[", deep) + strings.Repeat("]", deep) + "\n", "bad.yaml:4:"},
		{"flow mappings", "version: 1\ntools: " + strings.Repeat("{a: ", deep) + "{}" + strings.Repeat("}", deep) + "\n", "bad.yaml:2:"},
		{"block sequences on one line", "version: 1\ntools:\n  x:\n    key:\n      " + strings.Repeat("- ", deep) + "a\n", "bad.yaml:5:"},
		{"brackets in quotes and comments", "version: 1 # " + strings.Repeat("[", deep) + "\nscope: \"" + strings.Repeat("[{- ", deep) + "\\\"\"\non_unknown:\n  command: ['" + strings.Repeat("[- ''", deep) + "', \"" + strings.Repeat("{", deep) + "\"]\n", ""},
		{"brackets in a plain scalar", "version: 1\nscope: a" + strings.Repeat("-", deep) + "\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("bad.yaml", []byte(c.src))
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %.300v", err)
			case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want) || !strings.Contains(err.Error(), "nested more than 100 deep")):
				t.Fatalf("got %.300v; want an error at %s saying it is nested too deep", err, c.want)
			}
		})
	}
}

// TestOverlapsShortcut: the literal prefix and suffix overlaps compares before intersect tell
// apart only globs that no name matches both; globs that share a name are still refused.
func TestOverlapsShortcut(t *testing.T) {
	for _, c := range []struct {
		a, b  string
		clash bool
	}{
		{"ab*", "ac*", false}, {"*ab", "*cb", false}, {"a?c", "b?c", false}, {"x?a?y", "x?b?y", false},
		{"?b*", "a?*", true}, {"a*", "*a", true}, {"ab*c", "a*bc", true}, {"é*", "*ü", true}, {"é?*", "?ü*", true},
	} {
		src := fmt.Sprintf("version: 1\ntools:\n  %q: {wait: 1s}\n  %q: {wait: 2s}\n", c.a, c.b)
		_, err := Parse("p.yaml", []byte(src))
		if got := err != nil && strings.Contains(err.Error(), "can match the same tool"); got != c.clash || got != (intersect(c.a, c.b) && specificity(c.a) == specificity(c.b)) {
			t.Errorf("%s and %s: refused %v, want %v: %v", c.a, c.b, got, c.clash, err)
		}
	}
}

// redact is the one setting a tool that fence: false passes through may have: its values are
// kept out of the server's stderr that wrap records (docs/privacy.md), so it is not refused
// as having no effect; any other setting beside fence: false still is.
func TestRedactBesidePassIsAccepted(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: 1\ntools:\n  c:\n    fence: false\n    redact: [card.number]\n"))
	if err != nil {
		t.Fatalf("redact beside fence: false: %v", err)
	}
	if got := p.For("c").Redact; len(got) != 1 {
		t.Fatalf("redact of c = %v; want card.number", got)
	}
	if _, err := Parse("p.yaml", []byte("version: 1\ntools:\n  c:\n    fence: false\n    redact: [card.number]\n    result: hash\n")); err == nil || !strings.Contains(err.Error(), `"result" has no effect`) {
		t.Fatalf("result beside fence: false and redact: %v; want it refused", err)
	}
}

// wait has an effect on a tool that fence: false passes through: it bounds how long its calls
// wait for the server's tool listing (wrap's TestPassedToolsWaitBoundsItsListingWait), so it
// is not refused as having no effect.
func TestWaitBesidePassIsAccepted(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: 1\ntools:\n  c:\n    fence: false\n    wait: 2s\n"))
	if err != nil {
		t.Fatalf("wait beside fence: false: %v", err)
	}
	if got := p.For("c"); got.Wait != 2*time.Second || got.Fence == nil || *got.Fence {
		t.Fatalf("settings of c = %+v; want it passed through with a wait of 2s", got)
	}
	if _, err := Parse("p.yaml", []byte("version: 1\ntools:\n  c:\n    fence: false\n    wait: 2s\n    rerun_safe: true\n")); err == nil || !strings.Contains(err.Error(), `"rerun_safe" has no effect`) {
		t.Fatalf("rerun_safe beside fence: false and wait: %v; want it refused", err)
	}
}

// TestParseCRLFPositions: a file saved with CRLF line ends (a Windows editor, git's autocrlf)
// gets its errors at the lines and columns of the same file with LF ends, comments included
// (policy init writes many): the YAML parser counted a comment's CR and LF as two lines, so
// an error below six comment lines pointed six lines too far. A file of lone CR line ends
// (YAML counts each a line break) is refused at its first (TestLoneCarriageReturnIsRefused).
func TestParseCRLFPositions(t *testing.T) {
	const lf = "# payments\nversion: 1   # the format\n# tools\ntools:\n  # the charge\n  charge:   # exact\n    wait: soon\n    # more\n    result: full\nbogus: 1\n"
	_, err := Parse("p.yaml", []byte(lf))
	if err == nil || !strings.HasPrefix(err.Error(), "p.yaml:7:11: wait:") {
		t.Fatalf("the LF file's errors: %v", err)
	}
	_, crlf := Parse("p.yaml", []byte(strings.ReplaceAll(lf, "\n", "\r\n")))
	if crlf == nil || crlf.Error() != err.Error() {
		t.Fatalf("CRLF file's errors:\n%v\nwant those of the LF file:\n%v", crlf, err)
	}
	if _, cr := Parse("p.yaml", []byte("version: 1\r# a\rbogus: 1\r")); cr == nil || !strings.HasPrefix(cr.Error(), "p.yaml:1:11: a carriage return") {
		t.Fatalf("lone CR line ends: %v", cr)
	}
}

// TestParseRefusesInvisibleCharacters: a policy is reviewed like code, so the file must read
// as it is. A Unicode format character written as itself is invisible (a zero-width space in
// a tool's name: the entry names another tool than the one the reviewer sees, and its key,
// redact or fence never apply) or reorders what is shown (a right-to-left override in a
// comment can show a line as other settings: "Trojan Source", CVE-2021-42574). Each is
// refused at its line and column; written as an escape in a double-quoted string it is
// visible, and accepted.
func TestParseRefusesInvisibleCharacters(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"zero-width space in a tool name", "version: 1\ntools:\n  create_charge\u200b:\n    redact: [card.number]\n", "bad.yaml:3:16: "},
		{"right-to-left override in a comment", "version: 1\ntools:\n  charge:\n    fence: false # \u202e eurt :ecnef\n", "bad.yaml:4:20: "},
		{"isolate in a quoted key", "version: 1\ntools:\n  \"list_\u2066*\u2069\":\n    fence: false\n", "bad.yaml:3:9: "},
		{"soft hyphen in the scope", "version: 1\nscope: pay\u00adments\n", "bad.yaml:2:11: "},
		{"tag character in a comment", "version: 1 # \U000E0066\U000E0065\n", "bad.yaml:1:14: "},
		{"byte-order mark inside", "version: 1\n\ufeffscope: s\n", "bad.yaml:2:1: "},
		// Default-ignorable, not format characters: drawn as nothing all the same.
		{"Hangul filler in an ignored path", "version: 1\ntools:\n  t:\n    ignore: [meta.ts\u3164]\n", "bad.yaml:4:21: "},
		{"combining grapheme joiner in a key", "version: 1\ntools:\n  t:\n    key: [order\u034f_id]\n", "bad.yaml:4:16: "},
		{"variation selector after ASCII", "version: 1\ntools:\n  charge\ufe0f:\n    fence: true\n", "bad.yaml:3:9: "},
		{"variation selector at a line's start", "version: 1\n\ufe0f# x\n", "bad.yaml:2:1: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse("bad.yaml", []byte(c.src))
			if err == nil || !strings.HasPrefix(err.Error(), c.want+"the file holds U+") || !strings.Contains(err.Error(), "invisible") {
				t.Fatalf("got %v (%+v); want one error starting %q naming the invisible character", err, p, c.want)
			}
		})
	}
	// An emoji's variation selector picks how the emoji is drawn: a comment may hold one.
	if _, err := Parse("ok.yaml", []byte("version: 1 # checked \u2714\ufe0f\n")); err != nil {
		t.Fatalf("an emoji with its variation selector in a comment: %v", err)
	}
	p, err := Parse("ok.yaml", []byte("\ufeffversion: 1\ntools:\n  \"x\\u200bx\":\n    fence: true\n"))
	if err != nil || len(p.Tools) != 1 || p.Tools[0].Pattern != "x\u200bx" {
		t.Fatalf("a format character written as an escape: %v %+v", err, p)
	}
}

// TestOverlapsReportedOncePerGlob: globs of one specificity that all overlap (every "*xy*"
// can match the name "xy…zw" of any other) are each reported once, with the first earlier
// glob they clash with. Every clashing pair was reported: 4,000 such globs in a 60 KB file made
// 8 million errors, 1.4 GB of text and 14 GB allocated in 27 s, and a 1 MiB file ran out of
// memory before policy check said a word.
func TestOverlapsReportedOncePerGlob(t *testing.T) {
	const n = 1500
	var b strings.Builder
	b.WriteString("version: 1\ntools:\n")
	for i := range n {
		fmt.Fprintf(&b, "  \"*%04x*\": {}\n", i)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Parse("p.yaml", []byte(b.String()))
	runtime.ReadMemStats(&after)
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("accepted, or not Errors: %v", err)
	}
	if len(es) != n-1 || !strings.Contains(es[0].Error(), `globs "*0001*" and "*0000*" (line 3) can match the same tool`) {
		t.Fatalf("%d errors, the first %v; want %d, one for each glob after the first", len(es), es[0], n-1)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Fatalf("a policy of %d bytes allocated %d MB to be refused", b.Len(), alloc>>20)
	}
}

// TestPathsWithBlankEndsRefused: a field path whose member name begins or ends with a blank
// other than the space YAML drops (a no-break space, an ideographic space, a line separator,
// the braille blank) reads as the path without it: `redact: [card.number<U+00A0>]` looks like
// `[card.number ]`, which YAML reads as card.number, but named a member "card.number\u00a0",
// so `policy check` said ok and the card number went into the ledger in clear (the real
// binary, with a real server); `ignore: [meta.ts<U+00A0>]` ignored nothing.
func TestPathsWithBlankEndsRefused(t *testing.T) {
	for _, blank := range []string{"\u00a0", "\u3000", "\u2028", "\u2029", "\u2003", "\u202f", "\u205f", "\u2800", " "} {
		for _, c := range []struct{ setting, path string }{
			{"redact", `card.number%s`}, {"redact", `%scard.*`}, {"ignore", `meta.ts%s`}, {"key", `order%s.id`},
		} {
			path := fmt.Sprintf(c.path, blank)
			src := fmt.Sprintf("version: 1\ntools:\n  charge:\n    %s: [%s]\n", c.setting, path)
			if blank == " " {
				// The space YAML drops can only be kept by quoting, where a reviewer sees it.
				src = fmt.Sprintf("version: 1\ntools:\n  charge:\n    %s: [%q]\n", c.setting, path)
			}
			_, err := Parse("p.yaml", []byte(src))
			// A line or paragraph separator is refused before, wherever it is in the file
			// (TestLineAndParagraphSeparatorsAreRefused).
			if err == nil || !strings.Contains(err.Error(), "p.yaml:4:") || !strings.Contains(err.Error(), "blank") && !strings.Contains(err.Error(), "line or paragraph separator") {
				t.Errorf("%s: [%+q]: got %v; want it refused at line 4 as a name with a blank end", c.setting, path, err)
			}
		}
	}
	// A tool's name is refused with any blank, the braille blank included.
	if _, err := Parse("p.yaml", []byte("version: 1\ntools:\n  charge\u2800:\n    redact: [card.number]\n")); err == nil || !strings.Contains(err.Error(), "p.yaml:3:") {
		t.Errorf("a tool named charge<U+2800>: got %v; want it refused at line 3", err)
	}
	// A blank inside a member's name is seen, and is taken as written.
	if _, err := Parse("p.yaml", []byte("version: 1\ntools:\n  charge:\n    redact: [card.number\u00a0x]\n    key: [\"order id\"]\n")); err != nil {
		t.Errorf("a blank inside a name: %v", err)
	}
}
