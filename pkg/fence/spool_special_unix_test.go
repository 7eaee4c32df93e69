//go:build unix

package fence

import (
	"context"
	"os"
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
