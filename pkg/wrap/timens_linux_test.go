package wrap_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestHolderInATimeNamespaceIsAlive: a wrap in a time namespace of its own with a boottime
// offset (unshare --time; CRIU restores containers into one) but this PID namespace holds a
// call while another wrap, in this time namespace, gets the same call. Linux shifts every
// start time a process reads in /proc by its own namespace's offset, so the two read
// different start times for the holder. The second wrap must still see the holder alive: it
// waits for the call and gets its result, and the child runs once, for a re-run-safe tool (a
// holder judged dead is taken over and its call run again) and for any other (a holder judged
// dead makes the call unknown, and its agent is told the effect may have happened while it
// runs).
func TestHolderInATimeNamespaceIsAlive(t *testing.T) {
	unshare := needUnshare(t, "a time namespace")
	if _, err := os.Stat("/proc/self/timens_offsets"); err != nil {
		t.Skip("skipped: this kernel has no time namespaces")
	}
	for _, flags := range [][]string{{"--rerun-safe", "slow"}, {"--fence", "slow"}} {
		t.Run(flags[0], func(t *testing.T) {
			r := newRig(t)
			r.prefix = []string{unshare, "--time", "--boottime", "86400", "--fork", "--"}
			w := r.wrap(flags...)
			r.prefix = nil
			args := `{"ms":1500,"tag":"timens` + flags[0] + `"}`
			first := make(chan result, 1)
			go func() { first <- call(t, w.Session, "slow", args) }()
			led := r.openLedger()
			var claim *fence.Record
			waitFor(t, "the call's record", func() bool {
				_ = led.Store().View(context.Background(), func(tx fence.Tx) error {
					return tx.Scan(fence.Filter{}, func(rec *fence.Record) bool { claim = rec; return false })
				})
				return claim != nil
			})
			if l := fence.OwnerLiveness(claim.Owner); l != fence.Alive || claim.State != fence.StateInFlight {
				t.Fatalf("the holder in a time namespace (%s) is judged %s here and its claim is %s (%s); want alive and in flight", claim.Owner, l, claim.State, claim.Reason)
			}
			w2 := r.wrap(flags...)
			x := call(t, w2.Session, "slow", args)
			if x.IsError || !strings.Contains(x.text(), "slow done") {
				t.Fatalf("the same call beside a live holder in a time namespace: %s; want the holder's result\nits log:\n%s", x.text(), w2.log.String())
			}
			select {
			case a := <-first:
				if a.IsError || !strings.Contains(a.text(), "slow done") {
					t.Fatalf("the holder answered %s", a.text())
				}
			case <-time.After(60 * time.Second):
				t.Fatal("the holder never answered")
			}
			if n := r.effectCount(); n != 1 {
				t.Fatalf("the child ran %d times, want once", n)
			}
		})
	}
}
