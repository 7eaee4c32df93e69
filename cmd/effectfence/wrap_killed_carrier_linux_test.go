package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestInFlightRefusalOfAKilledWrapsCallSaysNoResultWillCome: wrap killed with SIGKILL while a
// process its server started still runs (the node under npx) leaves the claim held until that
// process group ends or the lease lapses. A duplicate through another wrap waits and is refused
// in flight. The refusal told it to retry later to receive the recorded result, which nobody
// would ever record: it must say that the sender is gone and name the group.
func TestInFlightRefusalOfAKilledWrapsCallSaysNoResultWillCome(t *testing.T) {
	bin := effectfence(t)
	dir := t.TempDir()
	ledgerPath := filepath.Join(dir, "ledger.db")
	// The server leaves a process of its group running after it is gone, as npx's node does.
	// (The duplicate's wrap runs the server plainly: --scope makes the calls one intent.)
	effects := filepath.Join(dir, "effects")
	args := []string{"--ledger", ledgerPath, "--scope", "carrier", "--wait", "1s", "--"}
	leaving := append(args, "sh", "-c", fmt.Sprintf("(sleep 120 &); exec %s demo-server --latency 1m --effects %s", bin, effects))
	plain := append(args[:len(args):len(args)], bin, "demo-server", "--latency", "1m", "--effects", effects)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}`

	first, in, _ := startWrapSession(t, dir, leaving...)
	fmt.Fprintln(in, call)
	waitOneClaim(t, ledgerPath)
	_, out, _ := runCLI(t, "", "ledger", "ls", "--ledger", ledgerPath, "--json")
	if g := regexp.MustCompile(`\+g(\d+)\.`).FindStringSubmatch(out); g != nil {
		pgid, _ := strconv.Atoi(g[1])
		t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }) // the sleep left behind
	} else {
		t.Fatalf("the claim names no process group: %s", out)
	}
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	_, in, sc := startWrapSession(t, dir, plain...)
	fmt.Fprintln(in, call)
	if !sc.Scan() {
		t.Fatal("no answer to the duplicate")
	}
	text, meta := toolText(t, sc.Bytes())
	m := regexp.MustCompile(`process group (\d+) it started still runs`).FindStringSubmatch(text)
	if meta["effectfence/code"] != fence.CodeInFlight {
		t.Fatalf("the duplicate was not refused in flight (the group must hold the claim): %s", text)
	}
	if m == nil || !strings.Contains(text, "will record no result") || strings.Contains(text, "will receive the recorded result") {
		t.Fatalf("the refusal promises a result nobody will record, or names no group:\n%s", text)
	}
	// The holder was of this PID namespace: its claim is fenced as soon as the group ends (the
	// lapse-only wording is for a holder in a container, which the duplicate cannot judge gone).
	if !strings.Contains(text, "Once that group ends, or the claim's lease lapses") || strings.Contains(text, "cannot judge gone") {
		t.Fatalf("the refusal of a killed wrap of this namespace does not say that the group's end fences the claim:\n%s", text)
	}
}
