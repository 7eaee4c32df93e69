//go:build linux

package sqlite_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
	"golang.org/x/sys/unix"
)

// TestDamagedWriteAheadLogIsRefused leaves a real write-ahead log on disk: a holder process
// commits an intent on a seeded ledger and is killed with kill -9, so its decisions are only
// in the log. One byte of the log is then flipped (in a frame's page, in a frame's checksum,
// in a frame's salt, in the log header's salt). SQLite takes a bad frame for a torn write and
// silently ignores it and every transaction after it, the header's damage the whole log: the
// committed intent reads as never run, and its duplicate would run again. Open (for writing
// and read-only) must refuse with a FileError, change neither file, and Check must report it.
// The intact log opens and replays the intent.
func TestDamagedWriteAheadLogIsRefused(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	seedLedger(t, good, 50)
	h := startHolder(t, good, "charge:walled", time.Minute, false, nil)
	if l := h.say("commit"); !strings.HasPrefix(l, "committed ") {
		t.Fatalf("holder: %s", l)
	}
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
	db, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	wal, err := os.ReadFile(good + "-wal")
	if err != nil || len(wal) < 32+3*(24+4096) {
		t.Fatalf("the holder left no log of several frames (%d bytes, %v)", len(wal), err)
	}
	frame := func(i int) int { return 32 + i*(24+4096) }
	cases := map[string]int{
		"page of the first frame":     frame(0) + 24 + 200,
		"checksum of the first frame": frame(0) + 16,
		"salt of the first frame":     frame(0) + 8,
		"salt in the log header":      16,
	}
	for name, at := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ledger.db")
			bad := bytes.Clone(wal)
			bad[at] ^= 0x5a
			if err := os.WriteFile(path, db, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path+"-wal", bad, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, ro := range []bool{false, true} {
				st, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: ro})
				if err == nil {
					rec, _ := fence.New(st, fence.Config{}).Status(ctx, "charge:walled")
					st.Close()
					t.Fatalf("a ledger whose log is damaged opened (read-only %v); the committed intent reads as %q", ro, rec.State)
				}
				var fe *sqlite.FileError
				if !errors.As(err, &fe) || !strings.Contains(err.Error(), "write-ahead log") || !strings.Contains(err.Error(), "effectfence ledger check") {
					t.Errorf("open (read-only %v): %v; want a FileError about the write-ahead log naming `effectfence ledger check`", ro, err)
				}
			}
			rep, err := sqlite.Check(ctx, path)
			if err != nil || rep.OK || !strings.Contains(strings.Join(rep.Problems, "\n"), "write-ahead log") {
				t.Errorf("Check = %+v, %v; want the damaged log reported", rep, err)
			}
			for p, want := range map[string][]byte{path: db, path + "-wal": bad} {
				if got, _ := os.ReadFile(p); !bytes.Equal(got, want) {
					t.Errorf("%s was changed", p)
				}
			}
		})
	}
	// The intact log is applied: the holder's commit replays. A log whose last frame is torn
	// (a write cut short, never synced) is what SQLite is built to drop: it opens.
	for name, log := range map[string][]byte{"intact": wal, "torn tail": wal[:len(wal)-100]} {
		path := filepath.Join(t.TempDir(), "ledger.db")
		if err := os.WriteFile(path, db, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path+"-wal", log, 0o600); err != nil {
			t.Fatal(err)
		}
		st := openT(t, path, sqlite.Options{})
		rec, err := fence.New(st, fence.Config{}).Status(ctx, "charge:walled")
		if err != nil || name == "intact" && rec.State != fence.StateDone {
			t.Fatalf("the %s log: charge:walled is %q (%v)", name, rec.State, err)
		}
	}
}

// TestRemovedIndexStopsTheWriter removes a ledger's shared-memory index (<ledger>-shm) while
// a store writes it, and a holder process then opens the ledger (it builds a new index) and
// commits. Two indexes over one log overwrite each other's frames: with four writers each
// side, the file failed integrity_check. The store that lost its index must refuse every
// write from then on with a FileError saying so, and the ledger must stay sound, with the
// holder's commit in it.
//
// Each case runs in a test process of its own: the store that lost its index leaves its
// connections open on purpose (closing them would checkpoint through the lost index), and a
// later case's holder would rightly see this process holding a log beside a name that no
// longer exists.
func TestRemovedIndexStopsTheWriter(t *testing.T) {
	const env = "EFFECTFENCE_TEST_INDEX_CASE"
	cases := map[string]string{
		"deleted": "rm",
		// The index the store maps keeps a name elsewhere (a hard link), so it still has a
		// link: what tells is that the ledger's -shm name now leads to the holder's new index.
		"another name kept": "ln",
		// Renamed: the file keeps a name, not the index's; where the file system keeps birth
		// times, the watch tells it from another file given its inode number.
		"moved away": "mv",
	}
	if name := os.Getenv(env); name != "" {
		how, ok := cases[name]
		if !ok {
			t.Fatalf("%s=%q names no case", env, name)
		}
		removedIndexStopsTheWriter(t, how)
		return
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for name := range cases {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(exe, "-test.run=^TestRemovedIndexStopsTheWriter$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), env+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil && strings.Contains(string(out), "--- SKIP: TestRemovedIndexStopsTheWriter") {
				t.Skipf("the case in a process of its own:\n%s", out)
			}
			if err != nil || !strings.Contains(string(out), "--- PASS: TestRemovedIndexStopsTheWriter") {
				t.Fatalf("the case in a process of its own: %v\n%s", err, out)
			}
		})
	}
}

func removedIndexStopsTheWriter(t *testing.T, how string) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	st := openT(t, path, sqlite.Options{})
	eng := fence.New(st, fence.Config{})
	commit := func(intent string) error {
		adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge_card", Args: []byte(`{}`)})
		if err != nil {
			return err
		}
		_, err = eng.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
		return err
	}
	if err := commit("before"); err != nil {
		t.Fatal(err)
	}
	switch how {
	case "ln":
		if err := os.Link(path+"-shm", filepath.Join(dir, "kept-shm")); err != nil {
			t.Fatal(err)
		}
	case "mv":
		var sx unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, path+"-shm", 0, unix.STATX_BTIME, &sx); err != nil || sx.Mask&unix.STATX_BTIME == 0 {
			t.Skipf("this file system keeps no birth times (%v): an index moved away is not seen", err)
		}
	}
	var err error
	if how == "mv" {
		err = os.Rename(path+"-shm", filepath.Join(dir, "moved-shm"))
	} else {
		err = os.Remove(path + "-shm")
	}
	if err != nil {
		t.Fatal(err)
	}
	if how == "mv" {
		// An effectfence process opening the ledger now is refused: this one holds the
		// file's lock and an index beside another name (checkOtherName; docs/ledger.md).
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		opener := exec.Command(exe, "-test.run=^$")
		opener.Env = append(os.Environ(), "EFFECTFENCE_TEST_OPEN_LEDGER="+path)
		if out, err := opener.Output(); err != nil || !strings.Contains(string(out), "refused: ") || !strings.Contains(string(out), "under another name") {
			t.Fatalf("another process opening the ledger with its index moved away: %v\n%s", err, out)
		}
		// A client that does not look (an older build, the sqlite3 shell) makes a new index
		// at the name.
		if err := os.WriteFile(path+"-shm", make([]byte, 32<<10), 0o600); err != nil {
			t.Fatal(err)
		}
		err = commit("after")
		var fe *sqlite.FileError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), "shared-memory index") {
			t.Fatalf("a write through the index moved away = %v; want a FileError about the index", err)
		}
		return
	}
	h := startHolder(t, path, "charge:holder", time.Minute, false, nil)
	if l := h.say("commit"); !strings.HasPrefix(l, "committed ") {
		t.Fatalf("holder: %s", l)
	}
	err = commit("after")
	var fe *sqlite.FileError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "shared-memory index") {
		t.Fatalf("a write through the removed index = %v; want a FileError about the index", err)
	}
	_ = h.in.Close() // the holder ends and closes the ledger
	_ = h.cmd.Wait()
	if err := st.Close(); err == nil {
		t.Error("Close of the store that lost its index reported nothing")
	}
	// A process of its own reads the ledger: this one's connections share the removed index.
	// The ledger is sound; its one problem is this process, which keeps the removed index
	// (its connections left open) and must be restarted
	// (TestCheckNamesAHolderWhoseIndexWasReplaced).
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "EFFECTFENCE_TEST_CHECK="+path)
	got, err := cmd.CombinedOutput()
	only := fmt.Sprintf(`problems ["process %d has the ledger open with an index (%s-shm) that was removed or replaced while it used it: it records nothing more (its calls fail), and what it would write no process opening the ledger now would see"]`, os.Getpid(), path)
	if err != nil || !strings.Contains(string(got), only) || !strings.Contains(string(got), "states map[done:2]") {
		t.Fatalf("the ledger after (want it sound, with before and the holder's commit done, and this process named): %v\n%s", err, got)
	}
}
