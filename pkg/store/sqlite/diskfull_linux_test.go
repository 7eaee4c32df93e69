package sqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// tinyDisk mounts a tmpfs of size bytes for the test and returns its directory, or skips
// the test where mounting is not allowed (not root, or no CAP_SYS_ADMIN).
func tinyDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Skipf("a full disk needs a small file system of its own: mounting tmpfs at %s: %v (run as root)", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file in dir until the file system is full, and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return path
			}
			t.Fatal(err)
		}
	}
}

// TestSettleOutlastsAFullDisk: an outcome that meets a full disk (SQLite cannot grow its
// write-ahead log, and the spool on the same file system cannot take the outcome either) is
// retried until the disk has room again, and then recorded; the duplicate replays it.
// RELIABILITY.md promises Settle keeps trying while the ledger does not answer, a full disk
// included.
func TestSettleOutlastsAFullDisk(t *testing.T) {
	dir := tinyDisk(t, 8<<20)
	path := filepath.Join(dir, "ledger.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eng := fence.New(st, fence.Config{SpoolDir: path + ".spool"})
	req := fence.Request{Intent: "charge:full-disk", Tool: "charge", Args: []byte(`{"amount":4900}`)}
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("claim: %+v, %v", adm, err)
	}
	// A result larger than anything the log has room for already: its frames need new blocks.
	result := []byte(`{"receipt":"` + strings.Repeat("r", 512<<10) + `"}`)
	filler := fill(t, dir)

	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	type settled struct {
		cert *fence.Cert
		err  error
	}
	done := make(chan settled, 1)
	go func() {
		cert, err := eng.Settle(sctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: result})
		done <- settled{cert, err}
	}()
	select {
	case s := <-done:
		t.Fatalf("Settle returned while the disk was full: %v, %v; want it to keep trying", s.cert != nil, s.err)
	case <-time.After(time.Second):
	}
	if rec, err := eng.Status(ctx, req.Intent); err != nil || rec.State != fence.StateInFlight {
		t.Fatalf("while the disk is full: %v, %v; want the claim still in flight", rec.State, err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s := <-done
	if s.err != nil || s.cert == nil || string(s.cert.Result) != string(result) {
		t.Fatalf("Settle once the disk had room: cert %v, %v", s.cert != nil, s.err)
	}
	again, err := eng.Prepare(ctx, req)
	if err != nil || again.Fresh() || again.Cert == nil || string(again.Cert.Result) != string(result) {
		t.Fatalf("the duplicate: fresh %v, %v; want the recorded result replayed", again.Fresh(), err)
	}
}
