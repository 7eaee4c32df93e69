package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A holder killed mid-call leaves its claim unknown with its lease still running: clear and
// resolve --did-not-happen are refused until the lease lapses. ls and show must say until
// when, and show must not offer --did-not-happen as a command to run now (it offered it, with
// no lease shown, and the pasted command was refused).
func TestShowGivesTheLeaseThatHoldsAKilledClaim(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	dir := t.TempDir()
	path, effects := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "effects")

	h := startHelper(t, "hold", path, effects) // the default lease: 60 s
	if h.line != "admitted" {
		t.Fatalf("first process: %q", h.line)
	}
	h.kill9(t)
	if got := startHelper(t, "attempt", path, effects).wait(t); got != "refused prior_failure" {
		t.Fatalf("after the kill, a duplicate got %q; want refused prior_failure", got)
	}

	code, out, errOut := runCLI(t, "", "ledger", "show", "charge:order-7", "--ledger", path)
	if code != exitOK {
		t.Fatalf("ledger show = %d\n%s%s", code, out, errOut)
	}
	lease := ""
	for _, ln := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(ln, "lease    until "); ok {
			lease = v
		}
	}
	until, err := time.Parse("2006-01-02 15:04:05Z", lease)
	if err != nil || until.Before(time.Now().Add(-time.Second)) {
		t.Fatalf("ledger show gives no running lease (%q, %v):\n%s", lease, err, out)
	}
	if !strings.Contains(out, "Until then `resolve --did-not-happen` and `clear` are refused") || !strings.Contains(out, "it did not: after "+lease) {
		t.Fatalf("ledger show does not say that clear waits for the lease:\n%s", out)
	}

	code, out, errOut = runCLI(t, "", "ledger", "ls", "--ledger", path)
	if code != exitOK || !strings.Contains(out, lease) {
		t.Fatalf("ledger ls does not show the lease until %s: %d\n%s%s", lease, code, out, errOut)
	}

	// What show says holds: the clear is refused now, until that time.
	code, _, errOut = runCLI(t, "", "ledger", "clear", "charge:order-7", "--ledger", path, "--reason", "checked")
	if code != exitError || !strings.Contains(errOut, "runs until") {
		t.Fatalf("clear within the lease = %d %s", code, errOut)
	}
}
