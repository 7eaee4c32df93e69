package wrap_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

var replayAdditions = regexp.MustCompile(`"effectfence/replayed":true,"effectfence/intent":"(?:[^"\\]|\\.)*","effectfence/cert":"[0-9a-f]*","effectfence/recorded_at":"[^"]*",?` +
	`|,?\{"type":"text","text":"effectfence: this is the recorded result(?:[^"\\]|\\.)*","_meta":\{"effectfence/note":true\}\}|"_meta":\{\},?`)

// Issue 12 item 5: a result no canonicaliser accepts (lone surrogate, duplicate member, 1e400)
// is a success, recorded as the server's exact bytes and replayed byte for byte.
func TestOddResultRecordedAndReplayedExactly(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	ctx := context.Background()
	first, err := w.CallTool(ctx, "odd", json.RawMessage(`{"tag":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(first), `"cut \ud83d <b> n=1"`) || !strings.Contains(string(first), `"k":1,"k":2`) {
		t.Fatalf("the first answer is not the server's bytes: %s", first)
	}
	again, err := w.CallTool(ctx, "odd", json.RawMessage(`{ "tag" : "x" }`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(again), `"effectfence/replayed":true`) {
		t.Fatalf("not a replay: %s", again)
	}
	got := replayAdditions.ReplaceAllString(string(again), "")
	got = replayAdditions.ReplaceAllString(got, "") // the _meta object wrap added, now empty
	if got != string(first) {
		t.Fatalf("replay is not the recorded bytes plus the marker and note:\n%s\n%s", got, first)
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("want 1 execution, got %d", n)
	}
	// The cert verifies from the ledger file: the exact bytes survived storage.
	if out, err := exec.Command(efBin, "ledger", "verify", "--ledger", r.ledger).CombinedOutput(); err != nil {
		t.Fatalf("ledger verify: %v\n%s", err, out)
	}
}

// Arguments holding what encoding/json escapes inside raw JSON (<, >, &, U+2028) are kept as
// given by the SQLite ledger: the cert wrap recorded verifies from the file with the real CLI,
// and a duplicate replays it.
func TestArgsWithHTMLCharactersVerify(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	ctx := context.Background()
	args := json.RawMessage("{\"tag\":\"<b>fish & chips</b>\u2028\"}")
	if _, err := w.CallTool(ctx, "odd", args); err != nil {
		t.Fatal(err)
	}
	again, err := w.CallTool(ctx, "odd", args)
	if err != nil || !strings.Contains(string(again), `"effectfence/replayed":true`) {
		t.Fatalf("not a replay: %s %v", again, err)
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("want 1 execution, got %d", n)
	}
	if out, err := exec.Command(efBin, "ledger", "verify", "--ledger", r.ledger).CombinedOutput(); err != nil {
		t.Fatalf("ledger verify: %v\n%s", err, out)
	}
}

// Issue 12 item 9: within the window a duplicate is replayed with a plain-text note; after it
// an identical call is a new action; a new value of the repeat argument is a new action, and
// a retry with the same value is replayed.
func TestReplayWindowAndDeliberateRepeat(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--replay-window", "1h", "--replay-window", "slow=2s")
	call(t, w.Session, "charge", `{"amount":5}`)
	x := call(t, w.Session, "charge", `{"amount":5}`)
	if !x.replayed() || !strings.Contains(x.note(), "recorded result of an identical earlier call (recorded at ") ||
		!strings.Contains(x.note(), "did NOT run again") || !strings.Contains(x.note(), `"effectfence_repeat"`) {
		t.Fatalf("replay without the note: %+v", x)
	}
	if at, err := time.Parse(time.RFC3339Nano, strings.Trim(string(x.Meta["effectfence/recorded_at"]), `"`)); err != nil || time.Since(at) > time.Hour {
		t.Fatalf("recorded_at: %s %v", x.Meta["effectfence/recorded_at"], err)
	}
	// A deliberate repeat: a new value runs; the same value again is a retry.
	if y := call(t, w.Session, "charge", `{"amount":5,"effectfence_repeat":"2"}`); y.replayed() || y.IsError {
		t.Fatalf("a deliberate repeat did not run: %+v", y)
	}
	if y := call(t, w.Session, "charge", `{"effectfence_repeat":"2","amount":5}`); !y.replayed() {
		t.Fatalf("a retry of the repeat ran again: %+v", y)
	}
	if n := r.effectCount(); n != 2 {
		t.Fatalf("want 2 charges, got %d", n)
	}
	// The server never saw the repeat argument: it would refuse unknown properties.
	for _, e := range mcptest.Effects(r.effects) {
		if strings.Contains(e, "effectfence_repeat") {
			t.Fatalf("the repeat argument reached the server: %s", e)
		}
	}
	// After slow's 2 s window the identical call runs again.
	call(t, w.Session, "slow", `{"ms":1,"tag":"w"}`)
	time.Sleep(2500 * time.Millisecond) // the window must pass; nothing is asserted about speed
	if z := call(t, w.Session, "slow", `{"ms":1,"tag":"w"}`); z.replayed() {
		t.Fatalf("an identical call after the window was replayed: %+v", z)
	}
	if n := r.effectCount(); n != 4 {
		t.Fatalf("want 4 effects, got %d", n)
	}
	// The superseded result stays in the ledger, audited.
	out, err := exec.Command(efBin, "ledger", "ls", "--ledger", r.ledger, "--json").Output()
	if err != nil || !strings.Contains(string(out), "~") {
		t.Fatalf("the superseded done record is not in the ledger: %v\n%s", err, out)
	}
	if out, err := exec.Command(efBin, "ledger", "verify", "--ledger", r.ledger).CombinedOutput(); err != nil {
		t.Fatalf("ledger verify with a superseded record: %v\n%s", err, out)
	}
}

// Arguments nested thousands deep, every object's members out of order, around a 256 KB string
// (what took seconds of copying per call before canon put members in order with one copy):
// the call runs once, the same value written in another order and spacing is replayed, and
// the ledger, which holds the arguments nested inside the record, verifies.
func TestDeepOutOfOrderArgumentsRunOnce(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap()
	const depth = 3000
	leaf := `"` + strings.Repeat("x", 256<<10) + `"`
	first := `{"deep":` + strings.Repeat(`{"b":`, depth) + leaf + strings.Repeat(`,"a":1}`, depth) + `,"amount":7}`
	again := `{ "amount": 7, "deep": ` + strings.Repeat(`{"a": 1, "b": `, depth) + leaf + strings.Repeat(` }`, depth) + "}"
	if x := call(t, w.Session, "charge", first); x.IsError || x.replayed() {
		t.Fatalf("the first call: %s", x.text())
	}
	if x := call(t, w.Session, "charge", again); !x.replayed() {
		t.Fatalf("the same arguments in another order were not replayed: %s", x.text())
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("want 1 execution, got %d", n)
	}
	if out, err := exec.Command(efBin, "ledger", "verify", "--ledger", r.ledger).CombinedOutput(); err != nil {
		t.Fatalf("ledger verify: %v\n%s", err, out)
	}
}
