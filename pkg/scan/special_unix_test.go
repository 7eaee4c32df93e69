//go:build unix

package scan

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestSpecialFilesAreNotOpened: a named pipe with a source file's name, directly or through
// a symlink, is reported and never opened (opening a pipe blocks until something writes to
// it: the scan hung for good). A symlink to a device is reported the same way. The test
// holds the pipe's write side ready: if the scan opens the pipe, the test sees a reader,
// fails, and closes the writer so the scan can end.
func TestSpecialFilesAreNotOpened(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeTool(t, root, "server.ts")
	fifo := filepath.Join(root, "pipe.ts")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	if err := os.Symlink("pipe.ts", filepath.Join(root, "link.ts")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(os.DevNull, filepath.Join(root, "null.js")); err != nil {
		t.Fatal(err)
	}

	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Scan(context.Background(), root, Options{})
		done <- result{rep, err}
	}()
	var got result
	for waiting := true; waiting; {
		select {
		case got = <-done:
			waiting = false
		default:
			// a writer can open the pipe without blocking only while a reader has it open
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				t.Error("the scan opened the named pipe")
				f.Close()
			} else if !errors.Is(err, syscall.ENXIO) {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	reasons := map[string]string{}
	for _, s := range got.rep.Skipped {
		reasons[s.Path] = s.Reason + ": " + s.Detail
	}
	for _, p := range []string{"pipe.ts", "link.ts", "null.js"} {
		if reasons[p] == "" {
			t.Errorf("%s is not reported as skipped (skipped: %v)", p, reasons)
		}
	}
	if got.rep.Files.Scanned != 1 || len(got.rep.Candidates) != 1 {
		t.Errorf("scanned %d files, candidates %v", got.rep.Files.Scanned, toolNames(got.rep.Candidates))
	}
}

// TestSymlinksOutsideTheRoot: a symlink that leads out of the scanned folder is reported
// and not followed (a link to / made the scan walk the whole file system, and a link to a
// folder of someone's code put its lines into the report).
func TestSymlinksOutsideTheRoot(t *testing.T) {
	t.Parallel()
	root, outside := t.TempDir(), t.TempDir()
	writeTool(t, root, "server.ts")
	if err := os.WriteFile(filepath.Join(outside, "secret.ts"), []byte(`server.tool("wire_money", "Wire money", {}, async () => { await fetch(u, { method: "POST" }) })`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"elsewhere": outside, "file.ts": filepath.Join(outside, "secret.ts")} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("server.ts", filepath.Join(root, "inside.ts")); err != nil {
		t.Fatal(err)
	}
	rep := scanDir(t, root, Options{})
	reasons := map[string]string{}
	for _, s := range rep.Skipped {
		reasons[s.Path] = s.Reason
	}
	for _, p := range []string{"elsewhere", "file.ts"} {
		if reasons[p] != SkipOutside {
			t.Errorf("%s: skipped as %q, want %q (skipped: %v)", p, reasons[p], SkipOutside, reasons)
		}
	}
	for _, tl := range append(rep.Candidates, rep.Others...) {
		if tl.Name == "wire_money" {
			t.Errorf("a tool outside the root was reported: %s:%d", tl.File, tl.Line)
		}
	}
	// The link inside the root leads to server.ts, which is read once (TestFileReachedByLinksIsReadOnce).
	if rep.Files.Scanned != 1 || len(rep.Candidates) != 1 || rep.Candidates[0].File != "server.ts" {
		t.Errorf("scanned %d files, candidates %v; want server.ts alone, the link inside the root to it followed to the same file", rep.Files.Scanned, toolNames(rep.Candidates))
	}
}

func writeTool(t *testing.T, dir, name string) {
	t.Helper()
	body := `server.tool("send_invoice", "Send an invoice", {}, async () => { await fetch(u, { method: "POST" }) })` + "\n"
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
