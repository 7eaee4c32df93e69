package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestInFlightRefusalOfAKilledWrapsRerunSafeCallSaysTheRetryRunsIt: as
// TestInFlightRefusalOfAKilledWrapsCallSaysNoResultWillCome, for a tool declared safe to
// re-run. Its duplicate was told that once the group ends the intent is fenced as unknown for
// an operator to settle; a retry after the group ended ran the call again at once (its claim
// taken over, as re-run safe claims of a gone holder are), nobody fenced anything.
func TestInFlightRefusalOfAKilledWrapsRerunSafeCallSaysTheRetryRunsIt(t *testing.T) {
	bin := effectfence(t)
	dir := t.TempDir()
	ledgerPath := filepath.Join(dir, "ledger.db")
	effects := filepath.Join(dir, "effects")
	args := []string{"--ledger", ledgerPath, "--scope", "carrier", "--wait", "1s", "--rerun-safe", "charge_card", "--"}
	leaving := append(args, "sh", "-c", fmt.Sprintf("(sleep 120 &); exec %s demo-server --latency 1m --effects %s", bin, effects))
	plain := append(args[:len(args):len(args)], bin, "demo-server", "--latency", "0s", "--effects", effects)
	call := `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}`

	first, in, _ := startWrapSession(t, dir, leaving...)
	fmt.Fprintf(in, call+"\n", 2)
	waitOneClaim(t, ledgerPath)
	_, out, _ := runCLI(t, "", "ledger", "ls", "--ledger", ledgerPath, "--json")
	g := regexp.MustCompile(`\+g(\d+)\.`).FindStringSubmatch(out)
	if g == nil {
		t.Fatalf("the claim names no process group: %s", out)
	}
	pgid, _ := strconv.Atoi(g[1])
	t.Cleanup(func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) })
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()

	_, in, sc := startWrapSession(t, dir, plain...)
	fmt.Fprintf(in, call+"\n", 2)
	if !sc.Scan() {
		t.Fatal("no answer to the duplicate")
	}
	refusal, meta := toolText(t, sc.Bytes())
	if meta["effectfence/code"] != fence.CodeInFlight {
		t.Fatalf("the duplicate was not refused in flight: %s", refusal)
	}

	_ = syscall.Kill(-pgid, syscall.SIGKILL) // the group ends, the lease still runs
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(-pgid, 0) == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process group %d still runs", pgid)
		}
	}
	fmt.Fprintf(in, call+"\n", 3)
	if !sc.Scan() {
		t.Fatal("no answer to the retry")
	}
	text, meta := toolText(t, sc.Bytes())
	ran := meta["effectfence/code"] == nil
	if ran && (strings.Contains(refusal, "fenced as unknown for an operator to settle: a retry") || !strings.Contains(refusal, "a retry then runs it again")) {
		t.Fatalf("the refusal said:\n%s\nand the retry after the group ended ran the call: %s", refusal, text)
	}
}
