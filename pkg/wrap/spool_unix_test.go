//go:build unix

package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestSpooledOutcomeIsNotAskedAbout drives real wrap processes through the spool. The SQLite
// ledger is moved aside while a call runs, so the call's outcome cannot be recorded and waits
// in the spool (<ledger>.spool/) once the lease (1 s) has passed; the agent is answered then.
// The ledger is put back. Until the next Recover (every 10 s) records the spooled outcome,
// the intent reads as unknown (its lease lapsed). Before, a duplicate in that window was
// treated as an unknown outcome: the on_unknown hook and the operator's commands, and a
// client with elicitation was asked what happened, and its "did not happen" ran the call a
// second time, though wrap held the first one's outcome. Now a refused duplicate records
// what the spool holds first and is replayed. The same when the holder is killed (kill -9)
// with its outcome in the spool and a duplicate meets its claim in another running wrap, and
// in a wrap started afterwards. Two more ways that outcome was lost: a tool declared re-run
// safe (--rerun-safe) was taken over from its dead holder and ran again, though its outcome
// waited in the spool; and a ledger under a directory whose name reads as a glob pattern
// ("w[1]") had a spool no drain ever found (filepath.Glob), so the intent stayed unknown.
func TestSpooledOutcomeIsNotAskedAbout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		killed bool
		flags  []string
		dir    string
	}{
		{name: "holder-alive"},
		{name: "holder-killed", killed: true},
		{name: "rerun-safe-holder-killed", killed: true, flags: []string{"--rerun-safe", "slow"}},
		{name: "glob-like-dir-holder-killed", killed: true, dir: "w[1]"},
	} {
		killed := tc.killed
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			if tc.dir != "" {
				dir := filepath.Join(r.dir, tc.dir)
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				r.ledger = filepath.Join(dir, "ledger.db")
			}
			flags := append([]string{"--lease-secs", "1"}, tc.flags...)
			var asked atomic.Int32
			r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"form":{}}},"clientInfo":{"name":"test-agent","version":"1"}}`)
			r.onRequest = func(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
				if method == "elicitation/create" {
					asked.Add(1)
					return json.RawMessage(`{"action":"accept","content":{"outcome":"did_not_happen"}}`), nil
				}
				return json.RawMessage(`{}`), nil
			}
			a := r.wrap(flags...)
			b := r.wrap(flags...) // another agent's wrap on the same ledger

			args, first, away := spooledCall(t, r, a, "spooled")
			spool := r.ledger + ".spool"
			if files, err := fence.SpoolFiles(spool); err != nil || len(files) != 1 {
				t.Fatalf("spool %s: %v, %v; want the call's outcome; log:\n%s", spool, files, err, a.log.String())
			}
			if killed {
				if err := syscall.Kill(a.Pid(), syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				<-a.Done()
			}
			if err := os.Rename(away, r.ledger); err != nil {
				t.Fatal(err)
			}
			dup := a
			if killed {
				dup = b
			}
			again := call(t, dup.Session, "slow", args)
			if !again.replayed() || again.same() != first.same() || asked.Load() != 0 || r.effectCount() != 1 {
				t.Fatalf("the duplicate with the outcome in the spool: replayed %v, %s (isError %v); asked %d times; %d executions; want the replay, nobody asked, 1 execution; log:\n%s",
					again.replayed(), again.text(), again.IsError, asked.Load(), r.effectCount(), dup.log.String())
			}
			if files, _ := fence.SpoolFiles(spool); len(files) != 0 {
				t.Errorf("spool still holds %v after the outcome was recorded", files)
			}
			// The duplicate is one attempt, replayed: the refusal that had it record the spool
			// first is no answer of its own (before, it was counted too, refused as failed).
			want := "admitted=0 replayed=1 refused(stale=0 race=0 in-flight=0 failed=0 conflict=0) total=1 prevented=1"
			if !killed {
				want = "admitted=1 replayed=1 refused(stale=0 race=0 in-flight=0 failed=0 conflict=0) total=2 prevented=1"
			}
			if got := sinceBootLine(t, dup); got != "effectfence since boot: "+want {
				t.Errorf("the duplicate's wrap counted %q, want %q", got, want)
			}
			c := r.wrap(flags...) // the next start
			if x := call(t, c.Session, "slow", args); !x.replayed() || x.same() != first.same() || r.effectCount() != 1 {
				t.Fatalf("a wrap started afterwards: replayed %v, %s; %d executions", x.replayed(), x.text(), r.effectCount())
			}
			rescued := false
			des, _ := os.ReadDir(filepath.Dir(r.ledger))
			for _, de := range des {
				rescued = rescued || strings.HasPrefix(de.Name(), filepath.Base(r.ledger)+".rescued-")
			}
			if !rescued {
				t.Errorf("the moved ledger was not noticed (no rescued copy beside %s)", r.ledger)
			}
		})
	}
}

// spooledCall has wrap a call slow (1.5 s, tagged tag) and moves the ledger away while the
// call runs, so that the call's outcome can only go to the spool; it returns the call's
// arguments, its answer (the server's result: the spool answers for the ledger) and where the
// ledger was moved.
func spooledCall(t *testing.T, r *rig, a *wrapProc, tag string) (args string, first result, away string) {
	t.Helper()
	args = fmt.Sprintf(`{"ms":1500,"tag":%q}`, tag)
	type answer struct {
		x   result
		err error
	}
	got := make(chan answer, 1)
	go func() {
		x, err := callE(a.Session, "slow", args)
		got <- answer{x, err}
	}()
	waitFor(t, "the call to start", func() bool { return strings.Contains(a.log.String(), "slow tag="+tag+" started") })
	away = r.ledger + ".away"
	if err := os.Rename(r.ledger, away); err != nil {
		t.Fatal(err)
	}
	var g answer
	select {
	case g = <-got:
	case <-time.After(60 * time.Second):
		t.Fatalf("no answer with the outcome in the spool; log:\n%s", a.log.String())
	}
	if g.err != nil || g.x.IsError || !strings.Contains(g.x.text(), "slow done") {
		t.Fatalf("the call: %s, %v; log:\n%s", g.x.text(), g.err, a.log.String())
	}
	return args, g.x, away
}
