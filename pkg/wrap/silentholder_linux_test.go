package wrap_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/ledgerturn"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// called is a call's answer, or its error.
type called struct {
	x   result
	err error
}

// callInBackground makes a call on s in a goroutine of its own; its answer comes on the channel.
func callInBackground(s *mcpstdio.Session, tool, args string) <-chan called {
	ch := make(chan called, 1)
	go func() {
		x, err := callE(s, tool, args)
		ch <- called{x, err}
	}()
	return ch
}

// TestClearRefusedWhileAStoppedHolderCanResume holds docs/ledger.md's rule for `ledger clear`
// and `ledger resolve --did-not-happen` with the adversary it is about: a wrap stopped
// (SIGSTOP) mid-call past its lease, its claim made unknown by a duplicate, still runs on this
// host. Freeing its intent would let the next attempt run the effect while the stopped wrap,
// resumed, finishes the first (two effects: seen before the rule). Both are refused, naming
// the live holder; resumed, its late result settles the intent and the duplicate replays it:
// one effect. A holder killed instead (kill -9) is gone, and its intent is cleared.
func TestClearRefusedWhileAStoppedHolderCanResume(t *testing.T) {
	needProc(t)
	r := newRig(t)
	w := r.wrap("--lease-secs", "1")
	// 3 s: the test must see the claim in flight before the call ends (300 ms was missed
	// once, at load 22).
	const args = `{"ms":3000,"tag":"silent-holder"}`
	first := callInBackground(w.Session, "slow", args)
	led := r.openLedger()
	claim := waitForClaim(t, led)
	// Stopped inside its call, not inside a transaction of its own (ledgerturn.StopOutsideTurn).
	if _, err := ledgerturn.StopOutsideTurn(w.Pid(), r.ledger); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(w.Pid(), syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	waitFor(t, "the child to run the effect and the stopped holder's lease to lapse", func() bool {
		return r.effectCount() == 1 && time.Now().After(claim.LeaseUntil.Add(200*time.Millisecond))
	})

	w2 := r.wrap("--lease-secs", "1")
	if x := call(t, w2.Session, "slow", args); !x.IsError || x.replayed() {
		t.Fatalf("a duplicate beside a stopped holder past its lease: %s; want it refused (unknown)", x.text())
	}
	if rec, err := led.Status(context.Background(), claim.Intent); err != nil || rec.State != fence.StateUnknown || !rec.Healable() {
		t.Fatalf("after the duplicate: %+v %v; want unknown, healable", rec, err)
	}
	if code, out, stderr := r.ledgerOut("show", claim.Intent); code != 0 || !strings.Contains(out, "still runs on this host past its lease") || strings.Contains(out, "--did-not-happen --reason") {
		t.Fatalf("ledger show of an intent whose stopped holder can resume: exit %d\n%s%s\nwant the live holder named, and no did-not-happen suggestion", code, out, stderr)
	}
	for _, c := range [][]string{
		{"clear", claim.Intent, "--reason", "no effect seen yet"},
		{"resolve", claim.Intent, "--did-not-happen", "--reason", "no effect seen yet"},
	} {
		code, stderr := r.ledgerCmd(c...)
		if code != 1 || !strings.Contains(stderr, "still runs on this host") || !strings.Contains(stderr, "--force") {
			t.Fatalf("ledger %s of an intent whose stopped holder can resume: exit %d\n%s\nwant exit 1 naming the live holder and --force", c[0], code, stderr)
		}
	}

	resume()
	select {
	case g := <-first:
		if g.err != nil || g.x.IsError || !strings.Contains(g.x.text(), "slow done") {
			t.Fatalf("the resumed holder answered %q (error %v); want the child's result\nwrap log:\n%s", g.x.text(), g.err, w.log.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the resumed holder never answered its agent\nwrap log:\n%s", w.log.String())
	}
	if x := call(t, w2.Session, "slow", args); x.IsError || !x.replayed() {
		t.Fatalf("the duplicate after the holder's late result: %s (replayed %v); want the recorded result", x.text(), x.replayed())
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("the child ran %d times, want once", n)
	}

	// Killed, the holder is gone: its intent is cleared.
	const args2 = `{"ms":60000,"tag":"killed-holder"}`
	go func() { _, _ = callE(w2.Session, "slow", args2) }()
	claim2 := waitForClaim(t, led) // the first intent is done: this is the second's
	if err := syscall.Kill(w2.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed holder to be judged gone", func() bool { return fence.OwnerLiveness(claim2.Owner) == fence.Dead })
	// The lease as the killed holder last renewed it (its heartbeats moved it on).
	last, err := led.Status(context.Background(), claim2.Intent)
	if err != nil {
		t.Fatal(err)
	}
	// Killed, but a process it started may outlive it: while the lease runs the clear is
	// refused, naming the lease; once it lapsed, it goes through. (Under load the holder can
	// be judged gone only after the lease lapsed, its child dying later than it: the first
	// clear then goes through, which it may only once the lease lapsed.)
	code, stderr := r.ledgerCmd("clear", claim2.Intent, "--reason", "its holder was killed; no charge at the provider")
	switch {
	case code == 0 && time.Now().Before(last.LeaseUntil):
		t.Fatalf("ledger clear of an intent whose holder was killed went through with its lease running (until %s)\n%s", last.LeaseUntil, stderr)
	case code == 0:
		return
	case code != 1 || !strings.Contains(stderr, "lease of claim"):
		t.Fatalf("ledger clear of an intent whose holder was killed, its lease running: exit %d\n%s\nwant exit 1 naming the lease", code, stderr)
	}
	time.Sleep(time.Until(last.LeaseUntil) + 200*time.Millisecond)
	if code, stderr := r.ledgerCmd("clear", claim2.Intent, "--reason", "its holder was killed; no charge at the provider"); code != 0 {
		t.Fatalf("ledger clear of an intent whose holder was killed: exit %d\n%s", code, stderr)
	}
}
