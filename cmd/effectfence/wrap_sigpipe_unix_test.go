//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestWrapOutlivesAnAgentThatClosesItsStdout is docs/DECISIONS-wrap.md's "SIGPIPE is caught so
// an agent that closes wrap's stdout cannot kill wrap mid-record". A charge runs (2 s) when
// the agent closes the pipe it reads wrap's answers from; wrap's next answer (a ping's) then
// meets a closed pipe. wrap must not die of it: the charge finishes and is recorded as done,
// and wrap exits on its own, not by a signal, once its stdin ends.
func TestWrapOutlivesAnAgentThatClosesItsStdout(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	ledger, effects := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "effects")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "wrap", "--ledger", ledger, "--grace", "60s", "--", bin, "demo-server", "--latency", "2s", "--effects", effects)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = outW
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	died := func(err error) {
		t.Helper()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				t.Fatalf("wrap died of %v after its agent closed its stdout\nstderr %s", ws.Signal(), stderr.String())
			}
		}
	}
	send := func(line string) {
		t.Helper()
		if _, err := in.Write([]byte(line + "\n")); err != nil {
			t.Fatalf("writing to wrap: %v\nstderr %s", err, stderr.String())
		}
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := bufio.NewReader(outR).ReadBytes('\n'); err != nil {
		t.Fatalf("initialize: %v\nstderr %s", err, stderr.String())
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}`)
	// The charge is under way (it takes 2 s) once it is admitted: claimed in the ledger.
	waitOneInFlight(t, ledger, stderr.String)
	outR.Close() // the agent stops reading
	send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)

	deadline := time.After(60 * time.Second)
	for n, _ := countLines(effects); n < 1; n, _ = countLines(effects) {
		select {
		case err := <-exited:
			exited <- err
			died(err)
			t.Fatalf("wrap exited (%v) before the charge ran to its end\nstderr %s", err, stderr.String())
		case <-deadline:
			t.Fatalf("the charge never ran to its end\nstderr %s", stderr.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
	in.Close()
	err = <-exited
	exited <- err
	died(err)

	l, err := store.Open(context.Background(), store.Options{Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var states []string
	err = l.Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(r *fence.Record) bool { states = append(states, r.Tool+"="+string(r.State)); return true })
	})
	if err != nil || strings.Join(states, ",") != "charge_card=done" {
		t.Fatalf("the ledger holds %v (%v); want the charge recorded as done\nstderr %s", states, err, stderr.String())
	}
}

// countLines counts the lines of a file (0 if it does not exist).
func countLines(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strings.Count(string(b), "\n"), nil
}
