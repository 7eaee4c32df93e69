//go:build unix

package mcpstdio_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// writes records each Write it gets.
type writes struct {
	mu sync.Mutex
	w  []string
}

func (r *writes) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.w = append(r.w, string(p))
	return len(p), nil
}

func (r *writes) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.w...)
}

// Config.Stderr gets the child's stderr in whole lines: a line written in two halves arrives
// in one write, and a last line the child did not end is ended when it exits. So the lines
// of children sharing one writer never mix.
func TestChildStderrArrivesInWholeLines(t *testing.T) {
	t.Parallel()
	var stderr, log writes
	script := `printf 'half one ' >&2; sleep 0.2; printf 'half two\nnext\n' >&2; printf 'no newline at exit' >&2; exit 3`
	_, err := mcpstdio.Start(context.Background(), mcpstdio.Config{Command: []string{"sh", "-c", script}, Stderr: &stderr, Log: &log, InitTimeout: 5 * time.Second})
	if err == nil {
		t.Fatal("a child that exits at start: no error")
	}
	want := "half one half two\nnext\nno newline at exit\n"
	deadline := time.Now().Add(5 * time.Second)
	for strings.Join(stderr.all(), "") != want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := stderr.all()
	if strings.Join(got, "") != want {
		t.Fatalf("the child's stderr: %q, want %q", got, want)
	}
	for _, w := range got {
		if !strings.HasSuffix(w, "\n") {
			t.Fatalf("a write of part of a line: %q (all: %q)", w, got)
		}
	}
	for _, l := range log.all() {
		if strings.Contains(l, "half") {
			t.Fatalf("the child's stderr reached Log: %q", l)
		}
	}
}
