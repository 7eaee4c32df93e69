package sqlite_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestLedgerWithTwoNamesIsRefused: a ledger file given a second name with a hard link (ln, or
// a backup made with cp -al) while a process uses it. SQLite keeps the write-ahead log beside
// the name it opens, so a process opening the second name read none of the first's log: it
// answered the holder's committed call as new (it would run again), while the holder lived
// and after it was killed. Now every name is refused while the file has two, and so is ledger
// check's report; with the second name removed, the receipt replays.
func TestLedgerWithTwoNamesIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "ledger.db")
	h, hash := committedHolder(t, path, "names:1")
	other := filepath.Join(dir, "backup", "ledger.db")
	if err := os.MkdirAll(filepath.Dir(other), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(path, other); err != nil {
		t.Fatal(err)
	}
	refused := func(when, name string) {
		t.Helper()
		refusedOpen(t, when, name, "names:1", "has 2 names (hard links to one file)", "-samefile "+name)
	}
	refused("while the holder lives", other)
	refused("while the holder lives", path)
	rep, err := sqlite.Check(ctx, other)
	if err != nil || rep.OK || rep.Kind != "file with several names" || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "2 names") {
		t.Fatalf("ledger check of the second name: %+v, %v", rep, err)
	}
	if err := h.cmd.Process.Kill(); err != nil { // kill -9: the receipt stays in path-wal
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the killed holder's log: %v, %v", fi, err)
	}
	refused("after the holder was killed", other)

	if err := os.Remove(other); err != nil {
		t.Fatal(err)
	}
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	adm, err := eng.Prepare(ctx, holderReq("names:1"))
	if err != nil || adm.Fresh() || adm.Cert.Hash != hash {
		t.Fatalf("with one name again: fresh %v, %v; want the holder's receipt %s", adm.Fresh(), err, hash)
	}
}

// TestSymbolicLinksNameTheLedgerItself: a symbolic link to the ledger file, or to its
// directory, is no second name (RELIABILITY.md): SQLite resolves it and keeps the log beside
// the file, so a process opening the link is not refused and replays the holder's receipt,
// while the holder lives and after it was killed.
func TestSymbolicLinksNameTheLedgerItself(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "ledger.db")
	h, hash := committedHolder(t, path, "linked:1")
	fileLink, dirLink := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "link")
	if err := errors.Join(os.Symlink(path, fileLink), os.Symlink(filepath.Dir(path), dirLink)); err != nil {
		t.Fatal(err)
	}
	replays := func(when string) {
		t.Helper()
		for _, name := range []string{fileLink, filepath.Join(dirLink, "ledger.db")} {
			st, err := sqlite.Open(ctx, name, sqlite.Options{})
			if err != nil {
				t.Fatalf("%s, opening %s: %v", when, name, err)
			}
			adm, err := fence.New(st, fence.Config{}).Prepare(ctx, holderReq("linked:1"))
			st.Close()
			if err != nil || adm.Fresh() || adm.Cert.Hash != hash {
				t.Fatalf("%s, through %s: fresh %v, %v; want the holder's receipt %s", when, name, err == nil && adm.Fresh(), err, hash)
			}
		}
	}
	replays("while the holder lives")
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
	replays("after the holder was killed")
}

// TestLedgerMovedWhileOpenIsRefusedUnderItsNewName: the ledger file is moved (mv) while a
// process has it open and its latest receipt is still only in the log beside the old name.
// A process opening the file under its new name read no such log: it answered the committed
// call as new. Now it is refused while the holder has the file open, naming the holder and
// the name it uses, and so is ledger check's report. Once the holder has closed the ledger
// (which checkpoints its log into the file), the new name opens and the receipt replays.
func TestLedgerMovedWhileOpenIsRefusedUnderItsNewName(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	h, hash := committedHolder(t, path, "moved:1")
	moved := filepath.Join(dir, "moved.db")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("(process %d uses it as %s)", h.cmd.Process.Pid, path)
	refusedOpen(t, "while the holder has it open", moved, "moved:1", "is open in another process under another name", want)
	rep, err := sqlite.Check(ctx, moved)
	if err != nil || rep.OK || rep.Kind != "file open under another name" || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], want) {
		t.Fatalf("ledger check of the moved file: %+v, %v", rep, err)
	}

	if err := h.in.Close(); err != nil { // the holder ends, closing its store
		t.Fatal(err)
	}
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("holder: %v", err)
	}
	eng := fence.New(openT(t, moved, sqlite.Options{}), fence.Config{})
	adm, err := eng.Prepare(ctx, holderReq("moved:1"))
	if err != nil || adm.Fresh() || adm.Cert.Hash != hash {
		t.Fatalf("once the holder closed the ledger: fresh %v, %v; want the holder's receipt %s", adm.Fresh(), err, hash)
	}
}

// TestStoreClosedAfterItsFileMovedLeavesTheReceiptsInIt: SQLite does not copy the
// write-ahead log into a file that moved when it closes it; the log stays beside the old name,
// so the moved file lacked every receipt committed since the last checkpoint. The store does
// it at Close, even when no write of its own noticed the move.
func TestStoreClosedAfterItsFileMovedLeavesTheReceiptsInIt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	st := openT(t, path, sqlite.Options{})
	eng := fence.New(st, fence.Config{})
	adm, err := eng.Prepare(ctx, holderReq("closed:1"))
	if err != nil || !adm.Fresh() {
		t.Fatal(adm, err)
	}
	cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":1}`))
	if err != nil {
		t.Fatal(err)
	}
	moved := filepath.Join(dir, "moved.db")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	again := fence.New(openT(t, moved, sqlite.Options{}), fence.Config{})
	adm, err = again.Prepare(ctx, holderReq("closed:1"))
	if err != nil || adm.Fresh() || adm.Cert.Hash != cert.Hash {
		t.Fatalf("the moved file, its store closed: fresh %v, %v; want the receipt %s", err == nil && adm.Fresh(), err, cert.Hash)
	}
	if _, err := sqlite.Open(ctx, path, sqlite.Options{}); err == nil || !strings.Contains(err.Error(), "write-ahead log") {
		t.Fatalf("the old path beside the log: %v; want it still refused", err)
	}
}

// TestLedgerMovedAfterItsHolderWasKilledIsRefused: a holder of a ledger used before commits,
// is killed with -9 (its receipt is only in the log beside the file's name), and then the
// file alone is moved.
// Opened under its new name, the file lacked the receipt and answered its duplicate as new.
// The file remembers the names it was used under, so the new name is refused while a log
// that may hold its decisions is left beside an old one, and ledger check says so; moved
// beside the new name as the advice says, the log applies and the receipt replays.
func TestLedgerMovedAfterItsHolderWasKilledIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	// A ledger used before under this name: a clean close checkpointed its name into the file.
	openT(t, path, sqlite.Options{}).Close()
	h, hash := committedHolder(t, path, "killed:1")
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
	moved := filepath.Join(dir, "data", "ledger.db")
	if err := os.MkdirAll(filepath.Dir(moved), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("was used under the name %s, and the write-ahead log left beside that name (%s-wal,", path, path)
	advice := fmt.Sprintf("mv %s-wal %s-wal", path, moved)
	// The log may be another ledger's, if one was kept at the old name since: the advice says
	// to make sure first.
	refusedOpen(t, "after the holder was killed", moved, "killed:1", want, advice, "if this file was the last ledger kept at "+path)
	rep, err := sqlite.Check(ctx, moved)
	if err != nil || rep.OK || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], want) || !strings.Contains(strings.Join(rep.Advice, " "), advice) {
		t.Fatalf("ledger check of the moved file: %+v, %v", rep, err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Rename(path+suffix, moved+suffix); err != nil {
			t.Fatal(err)
		}
	}
	eng := fence.New(openT(t, moved, sqlite.Options{}), fence.Config{})
	adm, err := eng.Prepare(ctx, holderReq("killed:1"))
	if err != nil || adm.Fresh() || adm.Cert.Hash != hash {
		t.Fatalf("with the log beside it: fresh %v, %v; want the holder's receipt %s", err == nil && adm.Fresh(), err, hash)
	}
}

// committedHolder starts a holder of intent on the ledger at path and has it commit; it
// returns the holder and the hash of its cert.
func committedHolder(t *testing.T, path, intent string) (*holderProc, string) {
	t.Helper()
	h := startHolder(t, path, intent, fence.DefaultLeaseTTL, false, nil)
	hash, ok := strings.CutPrefix(h.say("commit"), "committed ")
	if !ok {
		t.Fatal("the holder did not commit")
	}
	return h, hash
}

// refusedOpen fails the test unless opening the ledger at name is refused with a FileError
// whose text holds every one of want. Had it opened, the failure says what a duplicate of the
// holder's committed intent got there.
func refusedOpen(t *testing.T, when, name, intent string, want ...string) {
	t.Helper()
	st, err := sqlite.Open(ctx, name, sqlite.Options{})
	if err == nil {
		adm, err := fence.New(st, fence.Config{}).Prepare(ctx, holderReq(intent))
		st.Close()
		t.Fatalf("%s, %s opened; the holder's committed call there: fresh=%v (%v), want the open refused", when, name, err == nil && adm.Fresh(), err)
	}
	var fe *sqlite.FileError
	if !errors.As(err, &fe) {
		t.Fatalf("%s, opening %s: %v; want a FileError", when, name, err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s, opening %s: %v; want it refused, saying %q", when, name, err, w)
		}
	}
}

// TestLedgerInABindMountedDirectoryIsOneName: the ledger's directory reachable at two paths
// (mount --bind, as a container's volume is on the host) is one ledger under either: the log
// beside each name is the same file. Both names used for writing once, a process opening the
// ledger under either, while a holder uses the other and after it was killed -9, was refused
// ("the write-ahead log left beside that name may hold decisions this file lacks": its own
// log), even under the holder's own name. It replays the holder's receipt under both. The test
// runs itself again in a mount namespace of its own, where the bind mount is made.
func TestLedgerInABindMountedDirectoryIsOneName(t *testing.T) {
	a, b := os.Getenv("EFFECTFENCE_TEST_BIND_A"), os.Getenv("EFFECTFENCE_TEST_BIND_B")
	if a == "" {
		unshare := needUnshare(t)
		dir := t.TempDir()
		a, b = filepath.Join(dir, "host"), filepath.Join(dir, "data")
		if err := errors.Join(os.Mkdir(a, 0o700), os.Mkdir(b, 0o700)); err != nil {
			t.Fatal(err)
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--", "sh", "-c",
			`mount --bind "$EFFECTFENCE_TEST_BIND_A" "$EFFECTFENCE_TEST_BIND_B" && exec "$0" -test.run='^TestLedgerInABindMountedDirectoryIsOneName$' -test.v`, exe)
		cmd.Env = append(os.Environ(), "EFFECTFENCE_TEST_BIND_A="+a, "EFFECTFENCE_TEST_BIND_B="+b)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestLedgerInABindMountedDirectoryIsOneName") {
			t.Fatalf("in a mount namespace with %s bound at %s: %v\n%s", a, b, err, out)
		}
		return
	}
	path, other := filepath.Join(a, "ledger.db"), filepath.Join(b, "ledger.db")
	for _, name := range []string{path, other} { // both names used for writing, and in the file
		st, err := sqlite.Open(ctx, name, sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	h, hash := committedHolder(t, path, "bound:1")
	replays := func(when string) {
		t.Helper()
		for _, name := range []string{other, path} {
			st, err := sqlite.Open(ctx, name, sqlite.Options{})
			if err != nil {
				t.Fatalf("%s, opening %s: %v", when, name, err)
			}
			adm, err := fence.New(st, fence.Config{}).Prepare(ctx, holderReq("bound:1"))
			st.Close()
			if err != nil || adm.Fresh() || adm.Cert.Hash != hash {
				t.Fatalf("%s, under %s: fresh %v, %v; want the holder's receipt %s", when, name, err == nil && adm.Fresh(), err, hash)
			}
		}
	}
	replays("while the holder lives")
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the killed holder's log: %v, %v", fi, err)
	}
	replays("after the holder was killed")
}

// TestLedgerMovedWhileOpenOnBtrfsIsRefused: TestLedgerMovedWhileOpenIsRefusedUnderItsNewName
// on btrfs (Fedora's and openSUSE's default file system), where stat reports a file's device
// as its subvolume's and /proc/locks as the file system's: the holder's locks were never found,
// and its committed call was answered as new under the new name. The test runs itself again
// in a mount namespace of its own, where a btrfs image is mounted; it needs mkfs.btrfs.
func TestLedgerMovedWhileOpenOnBtrfsIsRefused(t *testing.T) {
	dir := os.Getenv("EFFECTFENCE_TEST_BTRFS")
	if dir == "" {
		unshare := needUnshare(t)
		mkfs, err := exec.LookPath("mkfs.btrfs")
		if err != nil {
			t.Skip("skipped: mkfs.btrfs (btrfs-progs) is not installed")
		}
		tmp := t.TempDir()
		img, dir := filepath.Join(tmp, "btrfs.img"), filepath.Join(tmp, "mnt")
		if err := errors.Join(os.Mkdir(dir, 0o700), os.WriteFile(img, nil, 0o600), os.Truncate(img, 128<<20)); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(mkfs, "-q", img).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.btrfs: %v\n%s", err, out)
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--", "sh", "-c",
			`mount -o loop "$1" "$EFFECTFENCE_TEST_BTRFS" || exit 7; exec "$0" -test.run='^TestLedgerMovedWhileOpenOnBtrfsIsRefused$' -test.v`, exe, img)
		cmd.Env = append(os.Environ(), "EFFECTFENCE_TEST_BTRFS="+dir)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 7 {
			t.Skipf("skipped: cannot mount a btrfs image here: %s", out)
		}
		if err != nil || !strings.Contains(string(out), "--- PASS: TestLedgerMovedWhileOpenOnBtrfsIsRefused") {
			t.Fatalf("on btrfs: %v\n%s", err, out)
		}
		return
	}
	path := filepath.Join(dir, "ledger.db")
	h, _ := committedHolder(t, path, "btrfs:1")
	moved := filepath.Join(dir, "moved.db")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("(process %d uses it as %s)", h.cmd.Process.Pid, path)
	refusedOpen(t, "while the holder has it open", moved, "btrfs:1", "is open in another process under another name", want)
}

// TestLedgerMovedWhileOpenWithItsLogRemovedIsRefused: the file moved while a holder has it
// open, and the log and index left beside the old name removed (rm, taking them for debris).
// The holder still writes that log, which the kernel names "OLD-wal (deleted)": it was not
// taken for a name, and the holder's committed call was answered as new under the new name.
func TestLedgerMovedWhileOpenWithItsLogRemovedIsRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	h, _ := committedHolder(t, path, "removed:1")
	moved := filepath.Join(dir, "moved.db")
	if err := errors.Join(os.Rename(path, moved), os.Remove(path+"-wal"), os.Remove(path+"-shm")); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("(process %d uses it as %s)", h.cmd.Process.Pid, path)
	refusedOpen(t, "while the holder has it open", moved, "removed:1", "is open in another process under another name", want)
}

// TestAnotherLedgerRemovedWhileOpenIsNoOtherName: a process uses two ledgers, and the
// directory of one of them is removed while it has it open (a temporary ledger's directory
// cleaned up, a test's, a per-task one). That ledger's log and index stay open in the process
// beside a name no file has any more, which is what a process that had the first ledger moved
// away from under it shows too: the holder of the first was taken for one using it under the
// removed name, and an open of the first ledger could be refused as "open in another process
// under another name" for as long as the holder lived (a test process that kept a ledger
// whose index was removed refused its children's opens of another ledger, 2026-12-07). A
// name the process has another file open by is that file's.
func TestAnotherLedgerRemovedWhileOpenIsNoOtherName(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	h, _ := committedHolder(t, path, "two:1")
	gone := filepath.Join(dir, "task", "ledger.db")
	if err := os.MkdirAll(filepath.Dir(gone), 0o700); err != nil {
		t.Fatal(err)
	}
	if l := h.say("open " + gone); l != "opened" {
		t.Fatalf("the holder's second ledger: %s", l)
	}
	if err := os.RemoveAll(filepath.Dir(gone)); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		t.Fatal(err)
	}
	if name := sqlite.SQLiteNameOf(h.cmd.Process.Pid, real); name != "" {
		t.Fatalf("the holder, which uses %s under its own name and another ledger removed from %s, was taken for one using it as %s", path, gone, name)
	}
	// A holder of the first ledger moved away from under it is still told.
	moved := filepath.Join(dir, "moved.db")
	if err := os.Rename(path, moved); err != nil {
		t.Fatal(err)
	}
	if name := sqlite.SQLiteNameOf(h.cmd.Process.Pid, moved); name != path {
		t.Fatalf("the holder of a ledger moved to %s: taken for one using it as %q, want %s", moved, name, path)
	}
}
