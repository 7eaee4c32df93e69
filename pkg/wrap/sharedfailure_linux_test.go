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

	"github.com/effectfence/effectfence/internal/ledgerturn"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestFailureIsSharedAfterThePersonSettled: a call that waited on another wrap's claim, was
// refused as unknown when that claim's lease lapsed, and asked the person through
// elicitation, is still a waiter of that claim when it asks the ledger again after the
// answer. The holder (a wrap in a PID namespace of its own, as in a container, which the
// waiting wrap, in a sibling namespace, cannot judge: not taken for a stalled holder, so the
// person is asked) is
// stopped until its lease lapses; while the person is being
// asked, it resumes and its call fails definitely (isError), which heals its claim; the
// person then answers "it did not happen". The call is given the failure it waited for
// (waited_attempt_failed), NOT executed a second time: the tool ran once. Before, the ask
// after the answer knew nothing of the wait, found the intent free and ran the call again.
func TestFailureIsSharedAfterThePersonSettled(t *testing.T) {
	t.Parallel()
	unshare := needUnshare(t, "a PID namespace")
	r := newRig(t)
	holderRig := *r
	holderRig.prefix = []string{unshare, "--pid", "--fork", "--mount-proc", "--"}
	gate := filepath.Join(r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"settled","until":%q}`, gate)
	var holder int // the holder wrap's pid (unshare --fork: its one child)
	held := make(chan result, 1)
	var asked atomic.Int32
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"form":{}}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	r.onRequest = func(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
		if method != "elicitation/create" {
			return json.RawMessage(`{}`), nil
		}
		asked.Add(1)
		// While the person thinks, the holder resumes and its call fails definitely.
		if err := syscall.Kill(holder, syscall.SIGCONT); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			t.Error(err)
		}
		select {
		case x := <-held:
			held <- x
		case <-time.After(60 * time.Second):
			t.Error("the holder's call was not answered after it resumed")
		}
		return json.RawMessage(`{"action":"accept","content":{"outcome":"did_not_happen"}}`), nil
	}
	a := holderRig.wrap("--lease-secs", "1")
	kids := childPids(a.Pid())
	if len(kids) != 1 {
		t.Fatalf("unshare (pid %d) has children %v, want the wrap alone", a.Pid(), kids)
	}
	holder = kids[0]
	r.prefix = holderRig.prefix // a sibling namespace: the holder is out of its sight
	b := r.wrap("--lease-secs", "1")
	go func() {
		x, err := callE(a.Session, "fail", args)
		if err != nil {
			t.Error(err)
		}
		held <- x
	}()
	waitFor(t, "the holder's call to reach its server", func() bool { return strings.Contains(a.log.String(), "mcptest: fail tag=settled started") })
	waited := answerInBackground(t, b, "fail", args)
	// The duplicate finds the claim in flight (its holder heartbeats it) and waits; then
	// the holder stops, outside a transaction of its own, and its lease lapses. No event says
	// the duplicate waits (a waiter on a SQLite ledger polls it and writes nothing there, unlike
	// PostgreSQL's effectfence_waiters); it is given a moment. Too short a moment cannot pass
	// the test wrongly: a duplicate that first looks after the lapse never waited, and runs the
	// call a second time once the person has answered.
	time.Sleep(1500 * time.Millisecond)
	if _, err := ledgerturn.StopOutsideTurn(holder, r.ledger); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(holder, syscall.SIGCONT) })
	var dup result
	select {
	case dup = <-waited:
	case <-time.After(90 * time.Second):
		t.Fatalf("the duplicate was not answered; its log:\n%s", b.log.String())
	}
	_ = syscall.Kill(holder, syscall.SIGCONT) // had nobody been asked
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var first result
	select {
	case first = <-held:
	case <-time.After(60 * time.Second):
		t.Fatalf("the holder's call was not answered; the duplicate %q; the holder's log:\n%s", dup.text(), a.log.String())
	}
	if !first.IsError || asked.Load() != 1 {
		t.Fatalf("the holder's call %q, the person asked %d times; want its failure, asked once; the duplicate's log:\n%s", first.text(), asked.Load(), b.log.String())
	}
	if n := r.effectCount(); n != 1 || !dup.IsError || string(dup.Meta["effectfence/code"]) != `"`+fence.CodeFailedWait+`"` || !strings.Contains(dup.text(), "NOT executed a second time") {
		t.Fatalf("the duplicate after the person answered: %q (meta %v), %d executions; want told the call it waited for failed (%s), NOT executed, 1 execution; its log:\n%s",
			dup.text(), dup.Meta, n, fence.CodeFailedWait, b.log.String())
	}
	// The intent is free: a retry runs it.
	if again := call(t, b.Session, "fail", args); !again.IsError || again.replayed() || r.effectCount() != 2 {
		t.Fatalf("a retry after the shared failure: %q, %d executions; want it run", again.text(), r.effectCount())
	}
}
