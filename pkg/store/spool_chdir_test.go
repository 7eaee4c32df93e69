package store_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// chdirProgram opens a ledger named by a relative path, then changes its working directory
// (as a daemon does, to /), runs an effect and reports it with Settle while the ledger does
// not take it (here: the request's context ended as the effect returned), so the outcome
// waits in the spool; the process ends before its background drain. "replay" opens the
// ledger again and asks for the intent.
const chdirProgram = `package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

func main() {
	ctx := context.Background()
	led, err := store.Open(ctx, store.Options{Ledger: os.Args[1]})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	// A re-run-safe claim (os.Args[4] "rerun-safe") is one the lease rules take over from a
	// gone holder unless its outcome waits in the spool.
	rerunSafe := os.Args[4] == "rerun-safe"
	req := fence.Request{Intent: "charge:order-9:" + os.Args[4], Tool: "charge_card", Args: []byte(` + "`" + `{"amount":100}` + "`" + `), RerunSafe: rerunSafe}
	switch os.Args[2] {
	case "settle":
		adm, err := led.Prepare(ctx, req)
		if err != nil || adm.Ticket == nil {
			fmt.Println("prepare:", adm, err)
			os.Exit(1)
		}
		if err := os.Chdir(os.Args[3]); err != nil {
			panic(err)
		}
		ended, cancel := context.WithCancel(ctx)
		cancel()
		_, err = led.Settle(ended, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: []byte(` + "`" + `{"charge":"ch_9"}` + "`" + `)})
		var sp fence.SpooledError
		if !errors.As(err, &sp) {
			fmt.Println("settle:", err)
			os.Exit(1)
		}
		fmt.Println("spooled")
		os.Exit(0) // before any drain
	case "replay":
		adm, err := led.Prepare(ctx, req)
		switch {
		case err != nil:
			fmt.Println(fence.CodeOf(err))
		case adm.Cert != nil:
			fmt.Println("replay", string(adm.Cert.Result))
		default:
			fmt.Println("ADMITTED")
		}
		led.Close()
	}
}
`

// TestSpoolOfARelativeLedgerSurvivesAChdir: a ledger named by a relative path keeps its spool
// beside the file wherever the process's working directory goes after the open. The outcome a
// process spooled after a chdir is recorded by the next process to open the ledger, and the
// intent replays. Before 2026-12-07 the spool was the relative path NAME.spool, read against
// the working directory of each use: the outcome went beside the new directory, where no
// process of the ledger looks, and the next process found the claim of a gone holder: unknown,
// its committed effect fenced for a person to decide, and a re-run-safe claim taken over:
// admitted, run again.
func TestSpoolOfARelativeLedgerSurvivesAChdir(t *testing.T) {
	t.Parallel()
	prog := buildUserProgram(t, chdirProgram)
	home, elsewhere := t.TempDir(), t.TempDir()
	run := func(args ...string) string {
		t.Helper()
		c := exec.Command(prog, args...)
		c.Dir = home
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, kind := range []string{"plain", "rerun-safe"} {
		if out := run("ledger.db", "settle", elsewhere, kind); out != "spooled" {
			t.Fatalf("%s: settle: %q", kind, out)
		}
		if _, err := os.Stat(filepath.Join(elsewhere, "ledger.db.spool")); err == nil {
			t.Errorf("%s: the outcome was spooled beside the directory the process moved to (%s), not beside its ledger", kind, elsewhere)
		}
		if out := run("ledger.db", "replay", home, kind); out != `replay {"charge":"ch_9"}` {
			t.Errorf("%s: the next process on the ledger: %q; want the spooled commit recorded and replayed", kind, out)
		}
	}
}
