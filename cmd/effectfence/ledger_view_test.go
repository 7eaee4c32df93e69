package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// What an agent can put in a ledger through serve to attack the operator's terminal: set the
// window title, clear the screen, forge a green "all clear", overwrite a line, reorder text.
const (
	evilIntent = "charge:\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b[32mall clear\x1b[0m"
	evilTool   = "refund\u202egnp.exe"
	evilAgent  = "bot\rOPERATOR"
	evilReason = "timeout\u009b2J\u009d0;title\u009c \u2066isolate\u2069"
	evilArgs   = `{"note":"\u001b[31m red","c1":"` + "\u0085\u009b" + `","rlo":"` + "\u202e" + `"}`
)

// longIntent is longer than any table column: it must be shown whole when not on a terminal.
var longIntent = "order:" + strings.Repeat("0123456789", 10) + ":end"

func seedHostile(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	adm, err := l.Prepare(ctx, fence.Request{Intent: evilIntent, Tool: evilTool, Args: []byte(evilArgs), Agent: evilAgent, Domain: "d\x1b[1m"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Abort(ctx, *adm.Ticket, evilReason); err != nil {
		t.Fatal(err)
	}
	adm, err = l.Prepare(ctx, fence.Request{Intent: longIntent, Tool: evilTool, Args: []byte(`{}`), Agent: evilAgent})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(ctx, *adm.Ticket, []byte(`"\u001b]52;c;cGF5bG9hZA==\u0007 \u009b done `+"\u202e"+`"`)); err != nil {
		t.Fatal(err)
	}
}

// actsOnTerminal reports a character that a terminal would act on rather than show: C0
// (except newline and tab), DEL, C1, bidi controls, separators, or bytes that are not UTF-8.
func actsOnTerminal(s string) (rune, bool) {
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && w == 1,
			r < 0x20 && r != '\n' && r != '\t', r == 0x7f, r >= 0x80 && r <= 0x9f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c,
			r == 0x2028, r == 0x2029:
			return r, true
		}
		i += w
	}
	return 0, false
}

// TestLedgerViewsEscapeHostileText runs the real binary over a ledger an agent filled with
// terminal escapes: no command may pass one through, in text or JSON, on stdout or stderr.
func TestLedgerViewsEscapeHostileText(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedHostile(t, path)
	env := []string{"NO_COLOR=1"}
	runs := [][]string{
		{"ledger", "ls", "--ledger", path},
		{"ledger", "ls", "--ledger", path, "--json"},
		{"ledger", "show", evilIntent, "--ledger", path},
		{"ledger", "show", evilIntent, "--ledger", path, "--json"},
		{"ledger", "show", longIntent, "--ledger", path},
		{"ledger", "verify", "--ledger", path},
		{"ledger", "verify", "--ledger", path, "--json"},
		{"ledger", "export", "--ledger", path},
		{"ledger", "stats", "--ledger", path},
		{"ledger", "clear", "charge:\x1b[2Jnosuch", "--reason", "x", "--ledger", path}, // the error line quotes it
		{"ledger", "show", "no\x1b]0;such\x07", "--ledger", path},
	}
	for _, args := range runs {
		r := runBinary(t, env, "", args...)
		for name, s := range map[string]string{"stdout": r.stdout, "stderr": r.stderr} {
			if c, bad := actsOnTerminal(s); bad {
				t.Errorf("effectfence %q: %s holds %U:\n%s", args, name, c, s)
			}
		}
		if r.code == exitUsage {
			t.Errorf("effectfence %q: usage error %s", args, r.stderr)
		}
	}

	// The text shows the escapes visibly, and the JSON still means exactly what was stored.
	r := runBinary(t, env, "", "ledger", "show", evilIntent, "--ledger", path)
	for _, want := range []string{`charge:\x1b]0;pwned\x07\x1b[2J`, `refund\u202egnp.exe`, `bot\rOPERATOR`, `timeout\u009b2J`,
		`ledger resolve $'charge:\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b[32mall clear\x1b[0m'`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	r = runBinary(t, env, "", "ledger", "show", evilIntent, "--ledger", path, "--json")
	var d ledger.Detail
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil || d.Record.Intent != evilIntent || d.Record.Tool != evilTool || d.Record.Reason != evilReason {
		t.Errorf("show --json does not round-trip (%v): %+v", err, d.Record)
	}
	r = runBinary(t, env, "", "ledger", "export", "--ledger", path)
	var line ledger.ExportLine
	first, _, _ := strings.Cut(r.stdout, "\n")
	if err := json.Unmarshal([]byte(first), &line); err != nil || line.Record == nil || (line.Record.Intent != evilIntent && line.Record.Intent != longIntent) {
		t.Errorf("export line does not round-trip (%v): %s", err, first)
	}
}

// Outside a terminal, ls shows whole intent ids, so what is pasted from it names the intent.
func TestLedgerLsFullIDsInAPipe(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedHostile(t, path)
	r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "ls", "--ledger", path)
	if r.code != exitOK || !strings.Contains(r.stdout, longIntent) || strings.Contains(r.stdout, "…") {
		t.Fatalf("ledger ls in a pipe = %d, want the whole id %s:\n%s", r.code, longIntent, r.stdout)
	}
	// On a terminal cells are clipped unless --wide; the choice is the ledgerCall's.
	c := ledgerCall{wide: false}
	if got := c.cell(longIntent, 20); utf8.RuneCountInString(got) != 20 || !strings.HasSuffix(got, "…") {
		t.Errorf("terminal cell = %q", got)
	}
	if got := c.cell("ab\x1b[2Jcd", 7); got != `ab\x1b…` { // 6 would leave "ab…"
		t.Errorf("clipped cell = %q, want the escape whole", got)
	}
	c.wide = true
	if got := c.cell(longIntent, 20); got != longIntent {
		t.Errorf("--wide cell = %q", got)
	}
}

func TestLedgerShowAndClearRefuseWhatIsNotThere(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedCLI(t, path)
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"ledger", "show", "nosuch", "--ledger", path}, exitError, `holds no intent "nosuch"`},
		{[]string{"ledger", "show", "nosuch", "--json", "--ledger", path}, exitError, `holds no intent "nosuch"`},
		{[]string{"ledger", "show", "", "--ledger", path}, exitUsage, "the intent is empty"},
		{[]string{"ledger", "show", " ", "--ledger", path}, exitUsage, "the intent is empty"},
		{[]string{"ledger", "clear", "", "--reason", "x", "--ledger", path}, exitUsage, "the intent is empty"},
		{[]string{"ledger", "export", "--json", "--ledger", path}, exitUsage, "unknown flag --json"},
		{[]string{"ledger", "export", "--format", "csv", "--ledger", path}, exitUsage, `unknown --format "csv"`},
	} {
		r := runBinary(t, nil, "", c.args...)
		if r.code != c.code || r.stdout != "" || !strings.Contains(r.stderr, c.says) {
			t.Errorf("effectfence %q = %d, stdout %q, stderr %q; want %d saying %q", c.args, r.code, r.stdout, r.stderr, c.code, c.says)
		}
	}
	// An intent that was cleared has no record but has its audit trail: show is not an error.
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Clear(ctx, "refund:9", "tester", "checked the PSP"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, []string{"NO_COLOR=1"}, "", "ledger", "show", "refund:9", "--ledger", path)
	if r.code != exitOK || !strings.Contains(r.stdout, "checked the PSP") {
		t.Errorf("show of a cleared intent = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
