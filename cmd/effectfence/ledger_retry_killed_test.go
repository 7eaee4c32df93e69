package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestRetryOfAKilledClearOrResolve: an operator's `ledger clear` or `ledger resolve` on a
// SQLite ledger is killed (SIGKILL) after its transaction committed and before it said so
// (its stdout is a pipe already full, so it is caught in the write of its answer, the commit
// behind it), and the operator runs the same command again. The retry must say, from the
// audit trail, that the intent was cleared or resolved already by that earlier attempt, and
// exit 0, changing nothing: before, it said the ledger holds no such intent (or, resolved as
// happened, that the intent is done and cannot be resolved), exit 1, though its work was done.
// Three commands: clear --force --claim, resolve --happened --claim, and resolve
// --did-not-happen without --claim (the claim the intent's last clear or resolve ended is
// matched by who made it and why).
func TestRetryOfAKilledClearOrResolve(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	bin := effectfence(t)
	dir := t.TempDir()
	loc := filepath.Join(dir, "ledger.db")
	ctx := context.Background()

	// charge:held (in flight, for clear --force) and charge:lost (unknown, for resolve
	// --happened), claimed in this process; charge:order-7 by a helper killed mid-call, its
	// lease lapsed (resolve --did-not-happen needs its holder gone).
	l, err := store.Open(ctx, store.Options{Ledger: loc})
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]uint64{}
	for _, intent := range []string{"charge:held", "charge:lost"} {
		adm, err := l.Prepare(ctx, fence.Request{Intent: intent, Tool: "charge", Args: []byte(`{}`)})
		if err != nil || !adm.Fresh() {
			t.Fatalf("claim %s: %+v %v", intent, adm, err)
		}
		tokens[intent] = adm.Ticket.Token
		if intent == "charge:lost" {
			if err := l.Lost(ctx, *adm.Ticket, "the PSP did not answer"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	h := startHelper(t, "hold", loc, filepath.Join(dir, "effects"), store.EnvLeaseSecs+"=1")
	if h.line != "admitted" {
		t.Fatalf("helper: %q", h.line)
	}
	h.kill9(t)
	waitLeaseLapsed(t, loc, "charge:order-7")

	for _, c := range []struct {
		intent, kind string
		args         []string
	}{
		{"charge:held", fence.EventClear, []string{"ledger", "clear", "charge:held", "--force", "--claim", strconv.FormatUint(tokens["charge:held"], 10), "--reason", "checked the PSP"}},
		{"charge:lost", fence.EventResolveHappened, []string{"ledger", "resolve", "charge:lost", "--happened", "--ref", "ch_1", "--claim", strconv.FormatUint(tokens["charge:lost"], 10), "--reason", "ch_1 is in the PSP dashboard"}},
		{"charge:order-7", fence.EventResolveDidNotHappen, []string{"ledger", "resolve", "charge:order-7", "--did-not-happen", "--reason", "no charge in the PSP dashboard"}},
	} {
		args := append(c.args, "--ledger", loc)
		killedAfterCommit(t, bin, loc, c.intent, c.kind, args)
		r := runBinary(t, []string{store.EnvLedger + "=", "NO_COLOR=1"}, "", args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "by your earlier attempt") || !strings.Contains(r.stdout, c.kind+" event") || !strings.Contains(r.stdout, "changed nothing") {
			t.Errorf("%s: the retry after the killed command: exit %d\nstdout %s\nstderr %s", c.intent, r.code, r.stdout, r.stderr)
		}
		if n := countEvents(t, loc, c.intent, c.kind); n != 1 {
			t.Errorf("%s: %d %s events after the retry", c.intent, n, c.kind)
		}
	}
}

// killedAfterCommit runs the effectfence command args with its stdout a pipe already full,
// waits until the ledger at loc holds a kind event of intent (the command committed and is
// caught writing its answer), and kills it with SIGKILL.
func killedAfterCommit(t *testing.T, bin, loc, intent, kind string, args []string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// Fill the pipe: a write that blocks (its deadline passes) has filled it.
	if err := w.SetWriteDeadline(time.Now().Add(200 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := w.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatal(err)
			}
			break
		}
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", store.EnvLedger+"=", "NO_COLOR=1")
	cmd.Stdout = w
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(5 * time.Minute); countEvents(t, loc, intent, kind) == 0; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("%s exited (%v) before its %s event was in the ledger; stderr:\n%s", strings.Join(args, " "), err, kind, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %s event within five minutes", strings.Join(args, " "), kind)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := <-exited; err == nil {
		t.Fatalf("%s finished before it was killed: its answer was not lost", strings.Join(args, " "))
	}
}

// countEvents counts the kind events of intent in the ledger at loc, read by a view.
func countEvents(t *testing.T, loc, intent, kind string) int {
	t.Helper()
	st, err := sqlite.Open(context.Background(), loc, sqlite.Options{ReadOnly: true, BusyTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n := 0
	err = st.View(context.Background(), func(tx fence.Tx) error {
		return tx.Events(intent, func(ev fence.Event) bool {
			if ev.Kind == kind {
				n++
			}
			return true
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
