//go:build linux

package sqlite_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// needTimeNS skips unless this process can create time namespaces: root, unshare, and a
// kernel with them.
func needTimeNS(t *testing.T) string {
	t.Helper()
	unshare := needUnshare(t)
	if _, err := os.Stat("/proc/self/timens_offsets"); err != nil {
		t.Skip("skipped: this kernel has no time namespaces")
	}
	return unshare
}

// ownerPid is the pid field of an owner string.
func ownerPid(t *testing.T, owner string) int {
	t.Helper()
	f := strings.Split(owner, "/")
	pid, err := strconv.Atoi(f[1])
	if len(f) != 5 || err != nil {
		t.Fatalf("owner %q has no pid", owner)
	}
	return pid
}

// TestTimeNamespaceHolder: a holder in a time namespace of its own whose boottime is a day
// ahead (unshare --time --boottime), in this PID namespace. Linux shifts every start time a
// process reads in /proc by its own time namespace's boottime offset, so this process and the
// holder read different start times for the holder. It is still judged for what it is, in
// both directions: alive while it runs (its claim in flight, then, lapsed, unknown and healed
// by its late commit; never "gone"), dead once killed (unknown at once).
func TestTimeNamespaceHolder(t *testing.T) {
	unshare := needTimeNS(t)
	path := filepath.Join(t.TempDir(), "ledger.db")
	const lease = 800 * time.Millisecond
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{LeaseTTL: lease})
	ahead := []string{unshare, "--time", "--boottime", "86400", "--fork", "--"}

	h := startHolder(t, path, "timens:alive", lease, true, nil, ahead...)
	if l := fence.OwnerLiveness(h.owner); l != fence.Alive {
		t.Fatalf("holder in a time namespace (%s) judged %s here (%s), want alive", h.owner, l, fence.LocalOwner())
	}
	if got := h.say("judge " + fence.LocalOwner()); got != "judged alive" {
		t.Fatalf("inside the time namespace, this process is %q, want alive", got)
	}
	if _, err := eng.Prepare(ctx, holderReq("timens:alive")); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("while its lease runs: %v; want in flight", err)
	}
	time.Sleep(2 * lease)
	wantUnknown(t, eng, "timens:alive") // alive and silent: fenced, not taken over though re-run safe
	got := h.say("commit")
	hash, ok := strings.CutPrefix(got, "committed ")
	if !ok {
		t.Fatalf("late commit from the time namespace: %s", got)
	}
	if adm, err := eng.Prepare(ctx, holderReq("timens:alive")); err != nil || adm.Cert == nil || adm.Cert.Hash != hash {
		t.Fatalf("after the heal: %+v %v; want the holder's cert", adm, err)
	}
	if kinds := strings.Join(eventKinds(t, eng, "timens:alive"), ","); kinds != "expired,heal" {
		t.Fatalf("audit trail %s, want expired,heal (never taken as gone)", kinds)
	}

	k := startHolder(t, path, "timens:killed", time.Hour, false, nil, ahead...)
	pid := ownerPid(t, k.owner) // unshare --fork's child, not k.cmd
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = k.cmd.Wait() // unshare reaps it and exits
	if l := fence.OwnerLiveness(k.owner); l != fence.Dead {
		t.Fatalf("killed holder in a time namespace judged %s, want dead", l)
	}
	wantUnknown(t, eng, "timens:killed")
}

// TestTimeNamespaceOffsetInPartTicks: a holder whose time namespace's boottime offset has a
// fraction of a clock tick (as CRIU sets them: to the nanosecond) cannot state its start time
// in this namespace's ticks (a start read there rounds apart by up to one tick). It writes a
// start nobody judges, so it is never called dead while it runs, and it judges nobody.
func TestTimeNamespaceOffsetInPartTicks(t *testing.T) {
	needTimeNS(t)
	path := filepath.Join(t.TempDir(), "ledger.db")
	const lease = 800 * time.Millisecond
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{LeaseTTL: lease})
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("skipped: python3 is not installed (unshare(1) takes whole seconds only)")
	}
	// The launcher stays outside: it creates the namespace its children enter, sets its
	// offsets (before any process has entered), forks the holder into it and waits.
	const launch = `import ctypes, os, sys
if ctypes.CDLL(None, use_errno=True).unshare(0x80) != 0:  # CLONE_NEWTIME
    sys.exit("unshare: errno %d" % ctypes.get_errno())
with open("/proc/self/timens_offsets", "w") as f:
    f.write("boottime 86400 5000000\n")
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
`
	h := startHolder(t, path, "timens:part", lease, false, nil, python, "-c", launch)
	if f := strings.Split(h.owner, "/"); len(f) != 5 || f[2] != "0" {
		t.Fatalf("holder with a part-tick offset wrote owner %q; want start 0", h.owner)
	}
	if l := fence.OwnerLiveness(h.owner); l != fence.CannotTell {
		t.Fatalf("holder with a part-tick offset judged %s here, want cannot tell", l)
	}
	if got := h.say("judge " + fence.LocalOwner()); got != "judged cannot tell" {
		t.Fatalf("with a part-tick offset, this process is %q, want cannot tell", got)
	}
	if _, err := eng.Prepare(ctx, holderReq("timens:part")); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("while its lease runs: %v; want in flight", err)
	}
}
