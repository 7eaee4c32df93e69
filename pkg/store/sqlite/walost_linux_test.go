//go:build linux

package sqlite_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestLogLostAfterItsHolderWasKilledIsRefused: a real holder commits a call and is killed
// with -9, which leaves that commit in the write-ahead log only, with the index (-shm) beside
// it counting the log's committed frames. The log is then removed, emptied or cut short (`rm
// ledger.db-wal`, the usual advice for a "locked" SQLite database, or a copy that lost its
// end), or damaged in its last transaction (which walDamage cannot tell from a power cut).
// Before, the next open took what verified for the whole log, rebuilt the index from it and
// opened the file without the rest: the committed call, claim and all, was answered as new
// (it ran again), or, only its commit lost, was fenced with its outcome gone. Now the open is
// refused and `ledger check` reports it, changing nothing (the index is the evidence: SQLite's
// first connection rebuilds it), and with the log put back the call is replayed.
func TestLogLostAfterItsHolderWasKilledIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		damage func(log string, b []byte) error
		want   string
	}{
		{"removed", func(log string, _ []byte) error { return os.Remove(log) }, "has no write-ahead log beside it"},
		{"emptied", func(log string, _ []byte) error { return os.Truncate(log, 0) }, "holds 0 committed frames"},
		{"cut short by its last frame", func(log string, b []byte) error {
			frame := 24 + int(binary.BigEndian.Uint32(b[8:12]))
			return os.Truncate(log, int64(len(b)-frame))
		}, "committed frames, but its index"},
		{"damaged in its last frame", func(log string, b []byte) error {
			d := append([]byte(nil), b...)
			d[len(d)-100] ^= 0xff
			return os.WriteFile(log, d, 0o600)
		}, "committed frames, but its index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "ledger.db")
			hash := killedCommittedHolder(t, path, 20, "charge:lost")
			log, err := os.ReadFile(path + "-wal")
			if err != nil || len(log) <= 32 {
				t.Fatalf("the killed holder left no log (%d bytes, %v)", len(log), err)
			}
			if err := tc.damage(path+"-wal", log); err != nil {
				t.Fatal(err)
			}
			file, index := fileSum(t, path), fileSum(t, path+"-shm")

			refusedOpen(t, "the log "+tc.name, path, "charge:lost", tc.want, path+"-shm", "put the whole log back at "+path+"-wal")
			rep, err := sqlite.Check(ctx, path)
			if err != nil || rep.OK || rep.Kind != "effectfence ledger" || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], tc.want) || !strings.Contains(strings.Join(rep.Advice, " "), "put the whole log back") {
				t.Fatalf("ledger check: %+v, %v; want the lost log reported, saying %q", rep, err, tc.want)
			}
			if fileSum(t, path) != file || fileSum(t, path+"-shm") != index {
				t.Fatal("the check or the refused open changed the file or its index")
			}

			// The way out the refusal gives first: the log put back, the call is replayed.
			if err := os.WriteFile(path+"-wal", log, 0o600); err != nil {
				t.Fatal(err)
			}
			eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
			adm, err := eng.Prepare(ctx, holderReq("charge:lost"))
			if err != nil || adm.Fresh() || adm.Cert.Hash != hash {
				t.Fatalf("with the log put back: fresh %v, %v; want the holder's receipt %s", err == nil && adm.Fresh(), err, hash)
			}
		})
	}
}

// TestLogLostForGoodOpensOnceItsIndexIsRemoved: the other way out the refusal gives, for a log
// lost for good. With the index removed (rm ledger.db-shm), as it says, the file opens
// without the lost decisions; and a log and index a holder left whole open as always.
func TestLogLostForGoodOpensOnceItsIndexIsRemoved(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	hash := killedCommittedHolder(t, path, 5, "charge:kept")
	// Both left whole: the next open applies the log.
	b, err := os.ReadFile(path + "-shm")
	if err != nil || len(b) < 136 || binary.NativeEndian.Uint32(b[16:]) == 0 {
		t.Fatalf("the killed holder left no index counting its frames (%d bytes, %v)", len(b), err)
	}
	kept := filepath.Join(t.TempDir(), "kept.db")
	for _, suffix := range []string{"", "-wal", "-shm"} {
		copyFile(t, path+suffix, kept+suffix)
	}
	eng := fence.New(openT(t, kept, sqlite.Options{}), fence.Config{})
	if adm, err := eng.Prepare(ctx, holderReq("charge:kept")); err != nil || adm.Fresh() || adm.Cert.Hash != hash {
		t.Fatalf("log and index left whole: fresh %v, %v; want the holder's receipt %s", err == nil && adm.Fresh(), err, hash)
	}

	if err := os.Remove(path + "-wal"); err != nil {
		t.Fatal(err)
	}
	refusedOpen(t, "the log removed", path, "charge:kept", fmt.Sprintf("rm %s-shm", path))
	if err := os.Remove(path + "-shm"); err != nil {
		t.Fatal(err)
	}
	st := openT(t, path, sqlite.Options{})
	adm, err := fence.New(st, fence.Config{}).Prepare(ctx, holderReq("charge:kept"))
	if err != nil || !adm.Fresh() {
		t.Fatalf("the index removed as the refusal says: fresh %v, %v; want the file opened without the lost decisions", err == nil && adm.Fresh(), err)
	}
}

// killedCommittedHolder seeds the ledger at path with n calls, has a holder process commit
// intent there and kills it with -9 (its log and index left beside the file), and returns
// the commit's cert hash.
func killedCommittedHolder(t *testing.T, path string, n int, intent string) string {
	t.Helper()
	seedLedger(t, path, n)
	h, hash := committedHolder(t, path, intent)
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
	return hash
}
