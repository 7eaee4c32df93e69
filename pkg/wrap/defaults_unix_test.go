//go:build unix

package wrap_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestDefaultsInForce runs the real binary with no flags (and none of the variables that
// change its defaults) and reads what a user would: the ledger file. The claim of a call in
// flight holds a lease of docs/wrap.md's --lease-secs default, the done record is kept for
// its --result-ttl-secs default, and a duplicate is replayed for docs/identity.md's replay
// window and run again after it (the done record's time is moved back in the real file
// between two runs of wrap, as if that much time had passed). The same holds with a policy
// file that names the tool but leaves these settings out (docs/policy.md: the built-in
// defaults apply).
func TestDefaultsInForce(t *testing.T) {
	t.Parallel()
	lease := time.Duration(docNumber(t, "docs/wrap.md", "`--lease-secs`\\s+\\(([0-9]+);") * float64(time.Second))
	ttl := time.Duration(docNumber(t, "docs/wrap.md", "`--result-ttl-secs` \\(([0-9]+);") * float64(time.Second))
	window := time.Duration(docNumber(t, "docs/identity.md", "replay window per tool, ([0-9]+) minutes by\\s+default") * float64(time.Minute))
	for _, policy := range []string{"", "version: 1\ndefaults:\n  redact: [note]\ntools:\n  slow:\n    redact: [tag]\n"} {
		name := "no policy"
		if policy != "" {
			name = "a policy naming the tool"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			r.extraEnv = []string{"EFFECTFENCE_LEASE_SECS=", "EFFECTFENCE_RESULT_TTL_SECS=", "EFFECTFENCE_ON_LEASE_EXPIRY="}
			var flags []string
			if policy != "" {
				flags = []string{"--policy", writePolicy(t, r, policy)}
			}
			defaultsInForce(t, r, flags, lease, ttl, window)
		})
	}
}

func defaultsInForce(t *testing.T, r *rig, flags []string, lease, ttl, window time.Duration) {
	w := r.wrap(flags...)
	const args = `{"ms":1500,"tag":"defaults"}`
	answered := make(chan result, 1)
	go func() {
		x, err := callE(w.Session, "slow", args)
		if err != nil {
			t.Error(err)
		}
		answered <- x
	}()
	led := r.openLedger()
	claim := waitForClaim(t, led)
	if got := claim.LeaseUntil.Sub(claim.ClaimedAt); got != lease {
		t.Errorf("a claim made with no --lease-secs holds a lease of %v (claimed %v, lease until %v); docs/wrap.md says %v",
			got, claim.ClaimedAt, claim.LeaseUntil, lease)
	}
	if x := <-answered; x.IsError || x.replayed() {
		t.Fatalf("the first call: error %v, replayed %v: %q", x.IsError, x.replayed(), x.text())
	}
	ctx := context.Background()
	rec, err := led.Status(ctx, claim.Intent)
	if err != nil || rec.State != fence.StateDone {
		t.Fatalf("after the call: %+v, %v; want done", rec, err)
	}
	if got := rec.ExpiresAt.Sub(rec.UpdatedAt); got != ttl {
		t.Errorf("a result recorded with no --result-ttl-secs is kept %v (done %v, expires %v); docs/wrap.md says %v",
			got, rec.UpdatedAt, rec.ExpiresAt, ttl)
	}
	w.Close()
	<-w.Done()

	// doneAgo moves the done record's time back to ago before now, as if that much time had
	// passed since the call, and runs the call again in a new wrap.
	doneAgo := func(ago time.Duration) result {
		t.Helper()
		err := led.Store().Update(ctx, func(tx fence.Tx) error {
			rec, err := tx.Get(claim.Intent)
			if err != nil {
				return err
			}
			rec.UpdatedAt = tx.Now().Add(-ago)
			return tx.Put(rec)
		})
		if err != nil {
			t.Fatal(err)
		}
		w := r.wrap(flags...)
		defer func() { w.Close(); <-w.Done() }()
		return call(t, w.Session, "slow", args)
	}
	if x := doneAgo(window - time.Minute); !x.replayed() || r.effectCount() != 1 {
		t.Fatalf("a duplicate %v after the call, with no --replay-window, was not replayed (%d runs; docs/identity.md's window is %v): replayed=%v %q",
			window-time.Minute, r.effectCount(), window, x.replayed(), x.text())
	}
	if x := doneAgo(window + time.Minute); x.IsError || x.replayed() || r.effectCount() != 2 {
		t.Fatalf("a duplicate %v after the call, with no --replay-window, was not run again (%d runs; docs/identity.md's window is %v): replayed=%v %q",
			window+time.Minute, r.effectCount(), window, x.replayed(), x.text())
	}
}

// TestHookRetriesAsThePolicySays runs the real binary with a policy whose on_unknown command
// fails every time (it appends a line to a file, then exits 1): without `retries` it is run
// once and then docs/policy.md's default number of times again; with `retries: 0`, which the
// table allows ("0 to 10"), it is run once.
func TestHookRetriesAsThePolicySays(t *testing.T) {
	t.Parallel()
	def := int(docNumber(t, "docs/policy.md", "\\| `retries` \\| 0 to 10: how often a failed delivery is tried again \\| ([0-9]+) \\|"))
	for _, c := range []struct {
		name, retries string
		want          int
	}{
		{"no retries key", "", 1 + def},
		{"retries: 0", "  retries: 0\n", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			runs := filepath.Join(r.dir, "hook-runs")
			path := writePolicy(t, r, fmt.Sprintf("version: 1\non_unknown:\n  command: [sh, -c, 'echo run >> \"$0\"; exit 1', %q]\n%stools:\n  die:\n    elicit: false\n", runs, c.retries))
			w := r.wrap("--policy", path)
			if x := call(t, w.Session, "die", `{"tag":"hook-retries"}`); !x.IsError {
				t.Fatalf("a call inside a dying server: %s", x.text())
			}
			waitFor(t, "the hook to give up", func() bool { return strings.Contains(w.log.String(), "failed after") })
			b, _ := os.ReadFile(runs)
			if n := strings.Count(string(b), "run\n"); n != c.want {
				t.Fatalf("policy on_unknown with %s: the failing command ran %d times, want %d\n%s", c.name, n, c.want, w.log.String())
			}
		})
	}
}

// TestWaitAndGraceInForce runs the real binary with no flags and a call stuck in its child: a
// duplicate is answered only after docs/wrap.md's --wait default (a lower bound; the answer
// names the wait it sat through), and on stdin's end wrap gives the stuck call docs/wrap.md's
// --grace default before it stops the child (it says so, and takes at least that long).
// Meanwhile its lease is renewed, no sooner than a third of the default lease.
func TestWaitAndGraceInForce(t *testing.T) {
	t.Parallel()
	needProc(t)
	wait := time.Duration(docNumber(t, "docs/wrap.md", "\\(`--wait`,\\s+default ([0-9]+) s\\)") * float64(time.Second))
	grace := time.Duration(docNumber(t, "docs/wrap.md", "`--grace` \\(default ([0-9]+)s\\)") * float64(time.Second))
	r := newRig(t)
	r.extraEnv = []string{"EFFECTFENCE_LEASE_SECS=", "EFFECTFENCE_RESULT_TTL_SECS=", "EFFECTFENCE_ON_LEASE_EXPIRY="}
	rw, child := startHung(t, r)
	led := r.openLedger()
	claims := records(t, led.Store(), fence.StateInFlight)
	if len(claims) != 1 {
		t.Fatalf("claims in flight: %+v", claims)
	}
	claim := claims[0]
	// The lease is renewed every third of it (docs/wrap.md): the first renewal, watched from
	// the claim on, comes no sooner than a third of the default lease after the claim (a lower
	// bound; that it comes before the lease lapses, TestToolSlowerThanTheLeaseRunsOnce holds).
	firstRenewal := make(chan fence.Record, 1)
	go func() {
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			now, err := led.Status(context.Background(), claim.Intent) // not records: no t.Fatal off the test's goroutine
			if err == nil && now.State == fence.StateInFlight && now.LeaseUntil.After(claim.LeaseUntil) {
				firstRenewal <- now
				return
			}
		}
		close(firstRenewal)
	}()

	began := time.Now()
	rw.send(t, strings.Replace(hungCall, `"id":1`, `"id":2`, 1))
	_, resp := rw.readUntil(t, "2")
	took := time.Since(began)
	if took < wait || !strings.Contains(resp, fmt.Sprintf("still running (waited %s for it)", wait)) || !strings.Contains(resp, "NOT executed a second time") {
		t.Errorf("with no --wait, a duplicate of a stuck call was answered after %v: %s; docs/wrap.md's wait is %v", took.Round(time.Millisecond), resp, wait)
	}

	lease := time.Duration(docNumber(t, "docs/wrap.md", "`--lease-secs`\\s+\\(([0-9]+);") * float64(time.Second))
	renewed, ok := <-firstRenewal
	if !ok {
		t.Fatalf("the stuck call's lease was never renewed: %+v", claim)
	}
	if step := renewed.LeaseUntil.Sub(claim.LeaseUntil); step < lease/3 {
		t.Errorf("the first renewal moved the lease by %v (claimed %v, until %v, renewed until %v): a heartbeat sooner than a third of docs/wrap.md's %v lease",
			step, claim.ClaimedAt, claim.LeaseUntil, renewed.LeaseUntil, lease)
	}

	began = time.Now()
	rw.in.Close()
	code := exitWithin(t, rw, 2*time.Minute)
	took = time.Since(began)
	log := rw.log.String()
	// "for 1 call" or "for 2 calls": the duplicate may still be listed as running when stdin
	// ends, its answer just written.
	for _, want := range []string{fmt.Sprintf("waiting up to %s for ", grace), fmt.Sprintf("grace of %s is over", grace)} {
		if !strings.Contains(log, want) {
			t.Errorf("with no --grace the log lacks %q (docs/wrap.md's grace is %v):\n%s", want, grace, log)
		}
	}
	if took < grace || code != 0 {
		t.Errorf("with no --grace wrap exited %d, %v after stdin closed; docs/wrap.md's grace is %v", code, took.Round(time.Millisecond), grace)
	}
	if alive(child) {
		t.Errorf("the MCP server (pid %d) outlived wrap", child)
	}
}
