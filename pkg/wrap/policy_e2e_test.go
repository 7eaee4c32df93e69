package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// Issue 15: every per-tool setting of a policy file changes what wrap does, end to end: the
// effectfence binary as wrap with --policy, the demo server (effectfence demo-server) as the
// child, its effects file as the count of executions, the ledger file as what was recorded.

// demoRig is a rig whose child is the demo server, writing its effects to r.effects.
func demoRig(t *testing.T, latency string) *rig {
	r := newRig(t)
	r.childCmdOverride = []string{efBin, "demo-server", "--effects", r.effects, "--latency", latency}
	return r
}

func writePolicy(t *testing.T, r *rig, src string) string {
	t.Helper()
	path := filepath.Join(r.dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// effectsOf counts the demo server's executions of tool.
func (r *rig) effectsOf(tool string) int {
	b, _ := os.ReadFile(r.effects)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, tool+" ") {
			n++
		}
	}
	return n
}

// records returns every record of the ledger, by tool.
func (r *rig) records(t *testing.T) map[string][]*fence.Record {
	t.Helper()
	led := r.openLedger()
	out := map[string][]*fence.Record{}
	err := led.Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(rec *fence.Record) bool {
			out[rec.Tool] = append(out[rec.Tool], rec)
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPolicyPerToolSettings: pass (by glob), key, ignore, redact and result: hash, each set by
// the file alone.
func TestPolicyPerToolSettings(t *testing.T) {
	t.Parallel()
	r := demoRig(t, "1ms")
	path := writePolicy(t, r, `version: 1
tools:
  charge_card:
    key: [order]
    redact: [card.number]
    result: hash
  "book_*":
    fence: false
  record_event:
    ignore: [note]
`)
	w := r.wrap("--policy", path)
	if !strings.Contains(w.log.String(), "policy "+path+": ok: 2 tools by name, 1 glob") {
		t.Errorf("wrap does not log the policy it read:\n%s", w.log.String())
	}

	// fence: false (by glob): the second identical booking reaches the server, which refuses it.
	if x := call(t, w.Session, "book_seat", `{"seat":"12A"}`); x.IsError || x.replayed() {
		t.Fatalf("first booking: %+v", x)
	}
	if x := call(t, w.Session, "book_seat", `{"seat":"12A"}`); !x.IsError || !strings.Contains(x.text(), "already booked") || x.replayed() {
		t.Fatalf("a passed-through duplicate must reach the server: replayed %v: %s", x.replayed(), x.text())
	}

	// key: [order]: same order, another amount: refused as a conflict, not run.
	first := call(t, w.Session, "charge_card", `{"amount":500,"order":"A-1","card":{"number":"4242424242424242"}}`)
	if first.IsError || first.replayed() {
		t.Fatalf("first charge: %+v", first)
	}
	if x := call(t, w.Session, "charge_card", `{"amount":700,"order":"A-1","card":{"number":"4242424242424242"}}`); !x.IsError || string(x.Meta["effectfence/code"]) != `"intent_conflict"` {
		t.Fatalf("same key, other arguments: want intent_conflict, got %+v %s", x, x.text())
	}
	// result: hash: the duplicate is told it was done, with no result.
	if x := call(t, w.Session, "charge_card", `{"amount":500,"order":"A-1","card":{"number":"4242424242424242"}}`); x.IsError || !x.replayed() ||
		string(x.Meta["effectfence/result_not_kept"]) != "true" || strings.Contains(x.text(), "ch_demo") {
		t.Fatalf("duplicate of a result: hash tool: %+v %s", x, x.text())
	}
	if n := r.effectsOf("charge_card"); n != 1 {
		t.Fatalf("charge_card ran %d times, want 1", n)
	}

	// ignore: [note]: calls differing only in note are one call.
	call(t, w.Session, "record_event", `{"name":"signup","note":"first try"}`)
	if x := call(t, w.Session, "record_event", `{"name":"signup","note":"retry"}`); !x.replayed() {
		t.Fatalf("a call differing in an ignored field must be replayed: %+v", x)
	}
	if n := r.effectsOf("record_event"); n != 1 {
		t.Fatalf("record_event ran %d times, want 1", n)
	}

	// redact: the card number never reached the ledger; the key of the charge did.
	recs := r.records(t)
	if len(recs["charge_card"]) != 1 || len(recs["book_seat"]) != 0 {
		t.Fatalf("records: %+v", recs)
	}
	raw, _ := json.Marshal(recs["charge_card"][0])
	if strings.Contains(string(raw), "4242424242424242") || !strings.Contains(string(raw), fence.Redacted) ||
		recs["charge_card"][0].KeepResult != fence.KeepHash {
		t.Fatalf("the charge's record: %s", raw)
	}
}

// TestPolicyWaitWindowRerunSafe: wait, replay_window and rerun_safe set per tool by the file.
func TestPolicyWaitWindowRerunSafe(t *testing.T) {
	t.Parallel()
	r := demoRig(t, "1500ms")
	path := writePolicy(t, r, `version: 1
defaults:
  wait: 1m
tools:
  "charge_*":
    replay_window: 1s
    rerun_safe: true
    wait: 100ms
`)
	w := r.wrap("--policy", path)
	const args = `{"amount":100}`
	type answer struct {
		x   result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		x, err := callE(w.Session, "charge_card", args)
		done <- answer{x, err}
	}()
	var claim *fence.Record
	waitFor(t, "the charge to be in flight", func() bool {
		for _, rec := range r.records(t)["charge_card"] {
			if rec.State == fence.StateInFlight {
				claim = rec
			}
		}
		return claim != nil
	})
	if !claim.RerunSafe {
		t.Fatalf("rerun_safe: true is not on the claim: %+v", claim)
	}
	// wait: 100ms (not the defaults' minute): the duplicate gives up while the first runs.
	if x := call(t, w.Session, "charge_card", args); !x.IsError || !strings.Contains(x.text(), "waited 100ms") {
		t.Fatalf("duplicate during the call: %+v %s", x, x.text())
	}
	if a := <-done; a.err != nil || a.x.IsError || a.x.replayed() {
		t.Fatalf("first charge: %v %s", a.err, a.x.text())
	}
	// replay_window: 1s: once it has passed, an identical call is a new charge.
	time.Sleep(1100 * time.Millisecond)
	if x := call(t, w.Session, "charge_card", args); x.IsError || x.replayed() {
		t.Fatalf("after the window: %+v %s", x, x.text())
	}
	if n := r.effectsOf("charge_card"); n != 2 {
		t.Fatalf("charge_card ran %d times, want 2", n)
	}
}

// TestPolicyFlagsWin: flags given with --policy replace the file's settings of their tools.
func TestPolicyFlagsWin(t *testing.T) {
	t.Parallel()
	r := demoRig(t, "1ms")
	path := writePolicy(t, r, `version: 1
tools:
  "record_*":
    fence: false
  charge_card:
    result: hash
`)
	w := r.wrap("--policy", path, "--fence", "record_event", "--keep-result", "charge_card=full")
	call(t, w.Session, "record_event", `{"name":"a"}`)
	if x := call(t, w.Session, "record_event", `{"name":"a"}`); !x.replayed() {
		t.Fatalf("--fence must beat the file's fence: false: %+v", x)
	}
	call(t, w.Session, "charge_card", `{"amount":1}`)
	if x := call(t, w.Session, "charge_card", `{"amount":1}`); !x.replayed() || !strings.Contains(x.text(), "ch_demo_0001") {
		t.Fatalf("--keep-result charge_card=full must beat result: hash: %+v %s", x, x.text())
	}
	if r.effectsOf("record_event") != 1 || r.effectsOf("charge_card") != 1 {
		t.Fatalf("effects: %d record_event, %d charge_card", r.effectsOf("record_event"), r.effectsOf("charge_card"))
	}
}

// TestPolicyRefusedAtStart: a bad policy stops wrap before anything starts, with its first
// error, how many there are and the `policy check` that lists each (a usage error is one line:
// README).
func TestPolicyRefusedAtStart(t *testing.T) {
	t.Parallel()
	r := demoRig(t, "1ms")
	path := writePolicy(t, r, "version: 1\ntools:\n  charge_card:\n    wiat: 1s\n    key: order\n")
	_, err := r.tryWrap("--policy", path)
	if err == nil {
		t.Fatal("wrap started with a bad policy")
	}
	for _, want := range []string{path + `:4:5: unknown key "wiat"`, "(2 errors in all: `effectfence policy check " + path + "` lists each)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("wrap's error lacks %q: %v", want, err)
		}
	}
	if _, statErr := os.Stat(r.effects); statErr == nil {
		t.Error("the server was started")
	}
	// EFFECTFENCE_POLICY names the file too.
	r.extraEnv = []string{"EFFECTFENCE_POLICY=" + path}
	if _, err := r.tryWrap(); err == nil || !strings.Contains(err.Error(), `unknown key "wiat"`) {
		t.Fatalf("EFFECTFENCE_POLICY is not read: %v", err)
	}
}

// TestPolicyRerunSafeAfterKill9: wrap is killed with a call of each of two tools inside the
// server; the next wrap with the same policy runs the rerun_safe tool's call again and fences
// the other's as unknown.
func TestPolicyRerunSafeAfterKill9(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := demoRig(t, "3s")
	path := writePolicy(t, r, `version: 1
tools:
  "charge_*":
    rerun_safe: true
`)
	w := r.wrap("--policy", path)
	go func() { _, _ = callE(w.Session, "charge_card", `{"amount":100}`) }()
	go func() { _, _ = callE(w.Session, "record_event", `{"name":"paid"}`) }()
	waitFor(t, "both calls to be in flight", func() bool {
		n := 0
		for _, recs := range r.records(t) {
			for _, rec := range recs {
				if rec.State == fence.StateInFlight {
					n++
				}
			}
		}
		return n == 2
	})
	kids := childPids(w.Pid())
	proc, err := os.FindProcess(w.Pid())
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Kill(); err != nil { // SIGKILL where there are signals
		t.Fatal(err)
	}
	<-w.Done()
	for _, k := range kids {
		waitFor(t, "the server to die with wrap", func() bool { return !alive(k) })
	}
	w2 := r.wrap("--policy", path)
	if x := call(t, w2.Session, "charge_card", `{"amount":100}`); x.IsError || x.replayed() {
		t.Fatalf("the rerun_safe tool's call must run again: %s", x.text())
	}
	if x := call(t, w2.Session, "record_event", `{"name":"paid"}`); !x.IsError || !strings.Contains(x.text(), "unknown outcome") {
		t.Fatalf("the other tool's call must stay fenced: %s", x.text())
	}
	if c, e := r.effectsOf("charge_card"), r.effectsOf("record_event"); c != 1 || e != 0 {
		t.Fatalf("effects: %d charge_card, %d record_event; want 1 and 0", c, e)
	}
}

// The policy's on_unknown hook runs through the real binary: a call made unknown (the server
// dies inside it) is reported once, to a command, with the resolve command; a tool the policy
// forbids to elicit about is still reported.
func TestPolicyOnUnknownHook(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events.jsonl")
	path := writePolicy(t, r, fmt.Sprintf(`version: 1
on_unknown:
  command: [sh, -c, 'cat >> "$0"; echo >> "$0"', %q]
  retries: 1
  timeout: 5s
tools:
  die:
    elicit: false
`, events))
	w := r.wrap("--policy", path)
	if x := call(t, w.Session, "die", `{"tag":"hooked"}`); !x.IsError {
		t.Fatalf("a call inside a dying server: %s", x.text())
	}
	waitFor(t, "the hook to write the event", func() bool {
		b, _ := os.ReadFile(events)
		return strings.Contains(string(b), "effectfence ledger resolve")
	})
	b, _ := os.ReadFile(events)
	var ev wrap.HookEvent
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(b))), &ev); err != nil || ev.Tool != "die" || ev.Event != "unknown" {
		t.Fatalf("hook event: %s %v", b, err)
	}
}
