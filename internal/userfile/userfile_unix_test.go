//go:build unix

package userfile_test

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/userfile"
)

// readAll opens path with userfile.Open and reads it to its end in a goroutine; the test
// fails if that has not finished within a minute (os.Open of a named pipe without a writer
// never returns).
func readAll(t *testing.T, path string) (string, error) {
	t.Helper()
	type answer struct {
		b   []byte
		err error
	}
	done := make(chan answer, 1)
	go func() {
		f, err := userfile.Open(path)
		if err != nil {
			done <- answer{nil, err}
			return
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		done <- answer{b, err}
	}()
	select {
	case a := <-done:
		return string(a.b), a.err
	case <-time.After(time.Minute):
		t.Fatalf("reading %s did not return within a minute", path)
		return "", nil
	}
}

// TestNamedPipeWithoutWriterReadsEmpty: a FIFO that nothing writes to reads as empty at once
// (os.Open waited for a writer for ever).
func TestNamedPipeWithoutWriterReadsEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	got, err := readAll(t, path)
	if err != nil || got != "" {
		t.Fatalf("got %q, %v; want empty, no error", got, err)
	}
}

// TestNamedPipeWithWriterReadsToItsEnd: a FIFO that has a writer is read to its end, what
// the writer sends after the open included (a shell's <(…) is such a pipe).
func TestNamedPipeWithWriterReadsToItsEnd(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("opening a FIFO read-write to hold a writer is Linux behaviour")
	}
	path := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	w, err := os.OpenFile(path, os.O_RDWR, 0) // a writer that is there before the reader
	if err != nil {
		t.Fatal(err)
	}
	f, err := userfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	if _, err := w.WriteString("version: 1\n"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	select {
	case s := <-got:
		if s != "version: 1\n" {
			t.Fatalf("read %q, want what the writer wrote", s)
		}
	case <-time.After(time.Minute):
		t.Fatal("reading the pipe did not end within a minute after its writer closed")
	}
}

// TestRegularFileReadsAsOsOpen: a regular file reads as with os.Open; a missing one fails.
func TestRegularFileReadsAsOsOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, []byte("version: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(t, path); err != nil || got != "version: 1\n" {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := readAll(t, path+".missing"); !os.IsNotExist(err) {
		t.Fatalf("missing file: %v, want not-exist", err)
	}
}
