//go:build linux

package sqlite_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// openerHelper opens the ledger at path as wrap, serve and the ledger commands do (store.Open:
// the spool drained, then the lease rules applied to every claim) and closes it.
func openerHelper(path string) string {
	l, err := store.Open(context.Background(), store.Options{Ledger: path})
	if err != nil {
		return "refused: " + strings.ReplaceAll(err.Error(), "\n", "; ")
	}
	if err := l.Close(); err != nil {
		return "close: " + err.Error()
	}
	return "opened"
}

// docs/RELIABILITY.md, rule 1: a dead holder's re-run-safe claim is not taken over while an
// outcome of the intent waits in the ledger's spool. A SQLite ledger's spool is one directory
// beside the file (mode 0700, its maker's), whatever user opens the ledger. A process of
// another user sharing the ledger cannot read it; before, it took that for "nothing waits",
// freed the claim at its open (Recover), and once the spool's owner drained it the holder's
// commit was refused as late: the intent was free, and the effect ran again. Now a spool that
// cannot be read fences the claim, and the drain heals it.
func TestSpoolOfAnotherUserIsNotTakenForEmpty(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to run a process as another user")
	}
	dir, err := os.MkdirTemp("", "spool-other-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	// The test binary's own directory is root's alone: a copy the other user may run.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(dir, "helper.test")
	copyFile(t, self, helper)
	if err := os.Chmod(helper, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ledger.db")

	// A real holder process (of another intent) gives the owner string of a process that
	// then dies: killed with -9 and reaped.
	h := startHolder(t, path, "other:intent", time.Hour, false, nil)
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()

	// That process claimed charge:spooled, re-run safe, and the ledger failed when it came to
	// commit: its commit waits in the spool.
	req := fence.Request{Intent: "charge:spooled", Tool: "charge", Args: []byte(`{"amount":1}`), RerunSafe: true}
	claimAndSpool(t, path, h.owner, time.Hour, req, `"ch_spooled"`, 300*time.Millisecond)
	if files, err := fence.SpoolFiles(path + ".spool"); err != nil || len(files) != 1 {
		t.Fatalf("spool holds %v (%v); want the commit", files, err)
	}

	// The ledger is shared with another user: its files are theirs to write, the spool not.
	names, _ := filepath.Glob(path + "*")
	for _, n := range names {
		if fi, err := os.Stat(n); err == nil && !fi.IsDir() {
			if err := os.Chmod(n, 0o666); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(helper, "-test.run=^$")
	cmd.Env = append(os.Environ(), "EFFECTFENCE_TEST_OPEN_LEDGER="+path, "HOME="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the other user's process: %v (%s)", err, out)
	}
	t.Logf("the other user's process: %s", strings.TrimSpace(string(out)))

	// Whatever that process answered, the intent must not be free: its commit waits.
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	again, err := l.Prepare(ctx, req)
	if err != nil || again.Fresh() || again.Cert == nil || string(again.Cert.Result) != `"ch_spooled"` {
		kinds := eventKinds(t, l.Engine, req.Intent)
		t.Fatalf("a duplicate once the spool's owner drained it: %+v %v (events %v); want the spooled commit replayed, never a second run", again, err, kinds)
	}
}

// docs/RELIABILITY.md, rule 5 and its spool exception: a re-run-safe claim whose holder is out
// of sight (a real process in another PID namespace, beside the judge's) and whose lease
// lapsed is taken over, unless an outcome of the intent waits in this host's spool (the
// holder's commit came while the ledger failed). A process that opened the ledger before the
// outcome was spooled (its open drained nothing) meets the claim after its lease: refused as
// unknown and healable, not taken over; asked again once DrainedFor recorded the spool, it
// replays the commit. The judge is this test binary run again in a PID namespace of its own
// (a process of this namespace, the holder's parent, sees the holder alive).
func TestUnseenHoldersSpooledCommitIsNotTakenOver(t *testing.T) {
	const ownerEnv, ledgerEnv = "EFFECTFENCE_TEST_UNSEEN_OWNER", "EFFECTFENCE_TEST_UNSEEN_LEDGER"
	owner, path := os.Getenv(ownerEnv), os.Getenv(ledgerEnv)
	if owner == "" {
		unshare := needUnshare(t)
		path = filepath.Join(t.TempDir(), "ledger.db")
		h := startHolder(t, path, "unseen:other", time.Hour, false, nil, unshare, "-p", "--fork", "--mount-proc", "--")
		judge := exec.Command(unshare, "-p", "--fork", "--mount-proc", "--", os.Args[0], "-test.v", "-test.count=1",
			"-test.run=^TestUnseenHoldersSpooledCommitIsNotTakenOver$")
		judge.Env = append(os.Environ(), ownerEnv+"="+h.owner, ledgerEnv+"="+path)
		out, err := judge.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestUnseenHoldersSpooledCommitIsNotTakenOver") {
			t.Fatalf("the judge in a sibling PID namespace: %v\n%s", err, out)
		}
		return
	}
	if l := fence.OwnerLiveness(owner); l != fence.CannotTell {
		t.Fatalf("holder in a sibling PID namespace (%s) judged %s, want cannot tell", owner, l)
	}

	judge, err := store.Open(ctx, store.Options{Ledger: path, RecoverEvery: time.Hour}) // no drain but the test's
	if err != nil {
		t.Fatal(err)
	}
	defer judge.Close()

	// The holder's claim of unseen:spooled, re-run safe, with a short lease; its commit spooled.
	const lease = 500 * time.Millisecond
	req := fence.Request{Intent: "unseen:spooled", Tool: "charge", Args: []byte(`{"amount":2}`), RerunSafe: true}
	adm := claimAndSpool(t, path, owner, lease, req, `"ch_unseen"`, 100*time.Millisecond)
	for time.Until(adm.Ticket.LeaseUntil) > -50*time.Millisecond {
		time.Sleep(50 * time.Millisecond)
	}

	_, err = judge.Prepare(ctx, req)
	var pf fence.PriorFailureError
	if !errors.As(err, &pf) || !pf.Healable {
		t.Fatalf("a duplicate after the lease, the commit spooled: %v (events %v); want unknown and healable, never taken over",
			err, eventKinds(t, judge.Engine, req.Intent))
	}
	if again, derr := judge.DrainedFor(ctx, err); !again || derr != nil {
		t.Fatalf("DrainedFor: %v %v; want the spool recorded and the duplicate asked again", again, derr)
	}
	rep, err := judge.Prepare(ctx, req)
	if err != nil || rep.Fresh() || rep.Cert == nil || string(rep.Cert.Result) != `"ch_unseen"` {
		t.Fatalf("asked again: %+v %v; want the spooled commit replayed", rep, err)
	}
}

// claimAndSpool claims req on the ledger at path as owner (its process, another one), and
// commits it with result while the ledger fails (for wait): the commit waits in the spool
// beside the ledger. It returns the claim's admission.
func claimAndSpool(t *testing.T, path, owner string, lease time.Duration, req fence.Request, result string, wait time.Duration) fence.Admission {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fs := &fencetest.DownStore{Store: st}
	eng := fence.New(fs, fence.Config{Owner: owner, SpoolDir: path + ".spool", LeaseTTL: lease})
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		eng.Close()
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	fs.Down.Store(true)
	sctx, cancel := context.WithTimeout(ctx, wait)
	_, err = eng.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(result)})
	cancel()
	fs.Down.Store(false)
	if cerr := eng.Close(); cerr != nil {
		t.Fatal(cerr)
	}
	if sp := (fence.SpooledError{}); !errors.As(err, &sp) {
		t.Fatalf("settle with the ledger down: %v; want it spooled", err)
	}
	return adm
}
