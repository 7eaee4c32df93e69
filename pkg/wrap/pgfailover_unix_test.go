//go:build unix

package wrap_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/pgcluster"
)

// failoverRig is a wrap on a ledger whose URL names a primary and its streaming standby
// (target_session_attrs=read-write: the store connects to whichever takes writes).
func failoverRig(t *testing.T, c, s *pgcluster.Cluster) (*rig, *wrapProc) {
	r := newRig(t)
	r.ledger = crashLedger(c, s)
	return r, r.wrap("--lease-secs", "5")
}

// midCall starts a slow call that is running in the child when it returns; its answer comes
// on the channel.
func midCall(t *testing.T, w *wrapProc, tag string) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		x, err := callE(w.Session, "slow", `{"ms":1500,"tag":"`+tag+`"}`)
		kind, text := classify(x, err)
		out <- answer{"0", tag, kind, text}
	}()
	waitFor(t, "the call to start in the child", func() bool { return strings.Contains(w.log.String(), "slow tag="+tag+" started") })
	return out
}

// TestFailoverToASynchronousStandby: docs/postgres.md, "receipts survive a failover only to a
// synchronous standby", the synchronous half. The primary (synchronous_standby_names '*') is
// killed with SIGKILL right after calls were answered, while one runs in the child and while
// another's claim waits for the standby, which was disconnected just before; the standby is
// promoted; the wrap, its URL naming both, goes on against it. Every answered call's
// duplicate is replayed; the running call's outcome is recorded on the new primary and
// replayed; the waiting claim was never answered, so its call did not run, and its duplicate
// runs it once. (Or the claim was made again on the new primary, the write seen waiting being
// another or the lost claim found not recorded there: then it ran once, after the failover,
// and its duplicate replays it.) With the database's synchronous_commit default at local too, which waits for
// the primary's disk alone: before, the store kept local, the waiting claim was answered
// without the standby, its call ran, the failover lost it and the duplicate ran it again.
func TestFailoverToASynchronousStandby(t *testing.T) {
	for _, dflt := range []string{"", "local"} {
		name := "default"
		if dflt != "" {
			name = "synchronous_commit=" + dflt
		}
		t.Run(name, func(t *testing.T) {
			c := pgcluster.New(t)
			if dflt != "" {
				c.Exec("postgres", "ALTER DATABASE postgres SET synchronous_commit = "+dflt)
			}
			s := c.Standby()
			c.SetSynchronous(true)
			r, w := failoverRig(t, c, s)
			first := map[string]string{}
			for _, tag := range []string{"op-1", "op-2", "op-3"} {
				x := call(t, w.Session, "slow", slowArgs(tag))
				if kind, text := classify(x, nil); kind != "ok" {
					t.Fatalf("%s: %s %s", tag, kind, text)
				}
				first[tag] = x.text()
			}
			mid := midCall(t, w, "mid")
			s.Exec("postgres", "ALTER SYSTEM SET primary_conninfo = ''")
			s.Exec("postgres", "SELECT pg_reload_conf()")
			waitFor(t, "the standby to disconnect", func() bool { return len(c.Query("postgres", "SELECT pid::text FROM pg_stat_replication")) == 0 })
			held := make(chan answer, 1)
			go func() {
				x, err := callE(w.Session, "slow", slowArgs("op-4"))
				kind, text := classify(x, err)
				held <- answer{"0", "op-4", kind, text}
			}()
			waitFor(t, "a claim to wait for the standby", func() bool {
				return len(c.Query("postgres", "SELECT pid::text FROM pg_stat_activity WHERE wait_event = 'SyncRep'")) > 0
			})
			c.Crash()
			s.Promote()
			if a := <-mid; a.kind != "ok" {
				t.Fatalf("the call running across the failover: %s %s; log:\n%s", a.kind, a.text, w.log.String())
			} else {
				first["mid"] = a.text
			}
			switch a := <-held; {
			case a.kind == "ok" && r.executions()["op-4"] == 1:
				// The claim was written on the new primary: the write seen waiting for the
				// standby was another (a heartbeat of the running call), or the lost claim was
				// found not recorded there (txid_status on the new primary) and made again. The
				// call ran once, after the failover, and its outcome is recorded there: its
				// duplicate must replay it (checked with the others below).
				t.Logf("op-4 was claimed on the new primary and ran once: %q", a.text)
				first["op-4"] = a.text
			case a.kind == "ok" || a.kind == "replay" || r.executions()["op-4"] != 0:
				t.Fatalf("the call whose claim waited for the standby: %s %q, ran %d times; log:\n%s", a.kind, a.text, r.executions()["op-4"], w.log.String())
			default:
				if x := call(t, w.Session, "slow", slowArgs("op-4")); x.replayed() || x.IsError {
					t.Errorf("op-4's duplicate after the failover: %+v", x)
				}
			}
			for tag, text := range first {
				args := slowArgs(tag)
				if tag == "mid" {
					args = `{"ms":1500,"tag":"mid"}`
				}
				x := call(t, w.Session, "slow", args)
				if kind, got := classify(x, nil); kind != "replay" || got != text {
					t.Errorf("%s after the failover: %s %q, want the replay of %q", tag, kind, got, text)
				}
			}
			for tag, n := range r.executions() {
				if n != 1 {
					t.Errorf("%s ran %d times", tag, n)
				}
			}
			if t.Failed() {
				t.Logf("wrap log:\n%s", w.log.String())
			}
		})
	}
}

// TestFailoverToAnAsynchronousStandbyLosesTheLastReceipts: the other half, stated exactly in
// docs/DECISIONS-postgres.md. An asynchronous standby that had not received the last commits
// when the primary died (here: disconnected from it, so that what it lacks is known) is
// promoted: the calls answered before it fell behind are replayed; those answered after are
// not in the ledger any more, and their duplicates run the effect again; a call that was
// running when the primary died, whose claim the standby lacks, is answered with its result
// (it ran), its outcome cannot be recorded (lease_lost: no claim), and its duplicate runs it
// again too.
func TestFailoverToAnAsynchronousStandbyLosesTheLastReceipts(t *testing.T) {
	c := pgcluster.New(t)
	s := c.Standby()
	r, w := failoverRig(t, c, s)
	kept := call(t, w.Session, "slow", slowArgs("op-1"))
	waitFor(t, "the standby to replay op-1", func() bool {
		lsn := c.Query("postgres", "SELECT pg_current_wal_lsn()::text")[0]
		return s.Query("postgres", "SELECT (pg_last_wal_replay_lsn() >= $1::pg_lsn)::text", lsn)[0] == "true"
	})
	s.Exec("postgres", "ALTER SYSTEM SET primary_conninfo = ''")
	s.Exec("postgres", "SELECT pg_reload_conf()")
	waitFor(t, "the standby to disconnect", func() bool { return len(c.Query("postgres", "SELECT pid::text FROM pg_stat_replication")) == 0 })
	lost := map[string]string{}
	for _, tag := range []string{"op-2", "op-3"} {
		x := call(t, w.Session, "slow", slowArgs(tag))
		if kind, text := classify(x, nil); kind != "ok" {
			t.Fatalf("%s: %s %s", tag, kind, text)
		}
		lost[tag] = x.text()
	}
	mid := midCall(t, w, "mid")
	c.Crash()
	s.Promote()
	a := <-mid
	if a.kind != "ok" {
		t.Fatalf("the call running across the failover: %s %q", a.kind, a.text)
	}
	if x := call(t, w.Session, "slow", slowArgs("op-1")); !x.replayed() || x.text() != kept.text() {
		t.Errorf("op-1, on the standby before the failover: %+v", x)
	}
	for tag, text := range lost {
		if x := call(t, w.Session, "slow", slowArgs(tag)); x.replayed() || x.IsError || x.text() == text {
			t.Errorf("%s after the failover: replayed %v %q (first %q); the docs say it runs again", tag, x.replayed(), x.text(), text)
		}
	}
	if x := call(t, w.Session, "slow", `{"ms":1500,"tag":"mid"}`); x.replayed() || x.IsError {
		t.Errorf("mid after the failover: %+v; the docs say it runs again", x)
	}
	if want := (map[string]int{"op-1": 1, "op-2": 2, "op-3": 2, "mid": 2}); !maps.Equal(r.executions(), want) {
		t.Errorf("executions %v, want %v", r.executions(), want)
	}
	if !strings.Contains(w.log.String(), "no claim is recorded") {
		t.Errorf("wrap did not log the running call's lost claim:\n%s", w.log.String())
	}
	if t.Failed() {
		t.Logf("wrap log:\n%s", w.log.String())
	}
}
