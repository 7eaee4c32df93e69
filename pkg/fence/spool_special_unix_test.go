//go:build unix

package fence

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A spool file that is no regular file (a named pipe left there by hand or by a tool) is
// named by the drain, and the outcomes beside it are recorded. Before, the drain opened the
// pipe to read it and waited for a writer for ever, the spool's lock held: every Recover,
// every open of the ledger (wrap, serve, the ledger commands) and every drain of another
// process of the host hung with it.
func TestSpoolFileThatIsAPipeDoesNotHangTheDrain(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := New(NewMemoryStore(), Config{SpoolDir: dir})
	adm, err := e.Prepare(ctx, Request{Intent: "charge:1", Tool: "charge", Args: []byte(`{}`)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	if _, err := e.spool.put(dir, Outcome{Kind: OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"ch_1"`)}); err != nil {
		t.Fatal(err)
	}
	pipe := filepath.Join(dir, "0000000000000000-1.json")
	if err := syscall.Mkfifo(pipe, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	type drained struct {
		n   int
		err error
	}
	done := make(chan drained, 1)
	go func() {
		n, err := e.DrainSpool(ctx)
		done <- drained{n, err}
	}()
	select {
	case d := <-done:
		if d.n != 1 || d.err == nil || !strings.Contains(d.err.Error(), pipe) {
			t.Errorf("drain: %d, %v; want the commit recorded and the pipe named", d.n, d.err)
		}
	case <-time.After(5 * time.Second):
		// Let the drain go: a writer opens the pipe and closes it (end of file).
		if w, err := os.OpenFile(pipe, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatal("the drain hung on a named pipe in the spool for 5 s")
	}
	if s, err := e.Status(ctx, "charge:1"); err != nil || s.State != StateDone {
		t.Errorf("charge:1 is %s (%v); want done", s.State, err)
	}
	if _, err := os.Lstat(pipe); err != nil {
		t.Errorf("the pipe is gone (%v); want it left for a person to look at", err)
	}
}

// A drain does not wait for ever on the spool's lock. Another process holding it (here a
// flock(1) process standing in for a drain stopped with SIGSTOP, in a frozen container, or
// waiting on a busy ledger) made every drain of the host wait as long: every Recover, every
// open of the ledger (a `ledger ls` waited as long as the holder slept) and, through the
// spool's mutex, every DrainedFor of the process. A drained report is a retry the ledger
// recognises (answered as the first, nothing written again), so after a short wait the drain
// goes on without the lock.
func TestDrainDoesNotWaitForEverOnTheSpoolsLock(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("no flock(1) to hold the lock from another process")
	}
	ctx := context.Background()
	dir := t.TempDir()
	e := New(NewMemoryStore(), Config{SpoolDir: dir})
	adm, err := e.Prepare(ctx, Request{Intent: "charge:2", Tool: "charge", Args: []byte(`{}`)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	if _, err := e.spool.put(dir, Outcome{Kind: OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"ch_2"`)}); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(dir, ".lock")
	// One process, the lock's holder to its end (sh execs sleep with the locked descriptor).
	holder := exec.Command("sh", "-c", `exec 9>>"$1" && "$2" 9 && exec sleep 60`, "sh", lock, flock)
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	}()
	for held := false; !held; {
		f, err := os.OpenFile(lock, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		held = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
		f.Close()
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := e.DrainSpool(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("drain: %v", err)
		}
	case <-time.After(15 * time.Second):
		_ = holder.Process.Kill()
		<-done
		t.Fatalf("the drain waited on another process's lock for %v", time.Since(start).Round(time.Second))
	}
	if s, err := e.Status(ctx, "charge:2"); err != nil || s.State != StateDone {
		t.Errorf("charge:2 is %s (%v); want done", s.State, err)
	}
	// Drained again, with the lock or without it, nothing changes: a retry of the commit.
	if _, err := e.apply(ctx, Outcome{Kind: OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(`"ch_2"`)}, true); err != nil {
		t.Errorf("the commit reported twice: %v; want the recorded cert", err)
	}
}
