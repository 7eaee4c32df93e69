package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerLsBoundsHugeTextInAPipe: an agent that reports a megabyte of reason (serve's
// fence_abort takes any) does not make `ledger ls` in a pipe write a megabyte for every
// record of the ledger, as a table padding every row to its widest cell did (about 40 MB for
// 30 records). Ids stay whole in a pipe; the reason is shortened there, and whole with
// --wide, in show and in --json (docs/ledger.md).
func TestLedgerLsBoundsHugeTextInAPipe(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("timeout\x1b ", 1<<20/9)
	intent := "charge:" + strings.Repeat("7", 900) // long, but every character of it shown
	for i := range 30 {
		id, reason := fmt.Sprintf("small:%02d", i), "gateway timeout"
		if i == 0 {
			id, reason = intent, huge
		}
		adm, err := l.Prepare(ctx, fence.Request{Intent: id, Tool: "charge_card", Args: []byte(`{}`), Agent: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Abort(ctx, *adm.Ticket, reason); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	env := []string{"NO_COLOR=1"}
	r := runBinary(t, env, "", "ledger", "ls", "--ledger", path)
	if r.code != exitOK || !strings.Contains(r.stdout, intent) || !strings.Contains(r.stdout, `timeout\x1b timeout`) || !strings.Contains(r.stdout, "…") {
		t.Fatalf("ls in a pipe: exit %d, %d bytes, the whole intent, the reason's start or its … missing; stderr %s", r.code, len(r.stdout), r.stderr)
	}
	if len(r.stdout) > 256<<10 {
		t.Fatalf("ls in a pipe wrote %d bytes for 30 records, one with a 1 MiB reason", len(r.stdout))
	}
	escaped := strings.ReplaceAll(huge, "\x1b", `\x1b`)
	r = runBinary(t, env, "", "ledger", "ls", "--wide", "--ledger", path)
	if r.code != exitOK || !strings.Contains(r.stdout, escaped) {
		t.Fatalf("ls --wide in a pipe: exit %d, the whole reason missing (%d bytes)", r.code, len(r.stdout))
	}
	r = runBinary(t, env, "", "ledger", "show", intent, "--ledger", path)
	if r.code != exitOK || !strings.Contains(r.stdout, "reason   "+escaped+"\n") {
		t.Fatalf("show: exit %d, the whole reason missing (%d bytes)", r.code, len(r.stdout))
	}
	r = runBinary(t, env, "", "ledger", "ls", "--json", "--ledger", path)
	if r.code != exitOK || !strings.Contains(r.stdout, strings.ReplaceAll(huge, "\x1b", `\u001b`)) {
		t.Fatalf("ls --json: exit %d, the whole reason missing (%d bytes)", r.code, len(r.stdout))
	}
}
