package main

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerCommandsRunAtOnceInOneProcess: the CLI is built anew for every run, so that two
// commands run at once in one process (tests call run in parallel; a program embedding it
// may too) share no flag's state: `ls` and `verify` shared one --wide flag, whose parse the
// race detector caught racing between two in-process runs (found 2026-12-07).
func TestLedgerCommandsRunAtOnceInOneProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, err := store.Open(context.Background(), store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := []string{"ledger", "ls", "--wide", "--ledger", path}
			if i%2 == 1 {
				cmd = []string{"ledger", "verify", "--wide", "--ledger", path}
			}
			if code, _, errOut := runCLI(t, "", cmd...); code != exitOK {
				t.Errorf("%v = %d %s", cmd, code, errOut)
			}
		}()
	}
	wg.Wait()
}
