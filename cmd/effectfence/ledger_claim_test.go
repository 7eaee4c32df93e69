package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// An operator reads `ledger show` of an intent whose holder was killed mid-call and, before
// they paste the command it suggests, another operator clears the intent and a new attempt
// claims it and is killed in turn. The pasted command was written about the first attempt: it
// must not settle the second, whose effect nobody has checked. Before, `resolve
// --did-not-happen` (and `clear`) acted on whatever claim held the intent: the second attempt
// was freed and the call ran a third time. The commands show suggests now name their claim
// (--claim), and resolve and clear of another claim change nothing; a command typed without
// --claim still acts on the intent as it is. Real processes on a real SQLite file and the real
// PostgreSQL; the suggestions pasted into a real bash.
func TestPastedCommandActsOnTheAttemptItWasWrittenAbout(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash:", err)
	}
	ledgers := map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "ledger.db") },
		"postgres": func(t *testing.T) string { return pgLedger(t) },
	}
	bin := effectfence(t)
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			for _, flag := range []string{"--did-not-happen", "--happened"} {
				t.Run(flag, func(t *testing.T) {
					loc, effects := ledgers[kind](t), filepath.Join(t.TempDir(), "effects")
					env := append(os.Environ(), "NO_COLOR=1", store.EnvLedger+"=", "XDG_STATE_HOME="+filepath.Join(t.TempDir(), "state"))
					killed := func() {
						t.Helper()
						h := startHelper(t, "hold", loc, effects, store.EnvLeaseSecs+"=1")
						if h.line != "admitted" {
							t.Fatalf("holder: %q", h.line)
						}
						h.kill9(t)
						waitLeaseLapsed(t, loc, "charge:order-7")
					}
					killed()
					show := exec.Command(bin, "ledger", "show", "charge:order-7", "--ledger", loc)
					show.Env = env
					out, err := show.Output()
					if err != nil {
						t.Fatalf("ledger show: %v\n%s", err, out)
					}
					var line string
					for l := range strings.SplitSeq(string(out), "\n") {
						if strings.Contains(l, "ledger resolve ") && strings.Contains(l, flag+" ") {
							line = strings.TrimSpace(l)
						}
					}
					if line == "" {
						t.Fatalf("ledger show suggests no resolve %s:\n%s", flag, out)
					}

					// Meanwhile: cleared by someone else, claimed again, its holder killed.
					if code, _, errOut := runCLI(t, "", "ledger", "clear", "charge:order-7", "--ledger", loc, "--reason", "no charge in the PSP"); code != exitOK {
						t.Fatalf("the other operator's clear = %d %s", code, errOut)
					}
					killed()
					if n := lines(t, effects); n != 2 {
						t.Fatalf("%d executions before the paste; want 2", n)
					}

					cmdline, ok := strings.CutPrefix(line, "effectfence ")
					if !ok {
						t.Fatalf("suggestion %q does not begin with effectfence", line)
					}
					paste := exec.Command(bash, "-c", shellQuote(bin)+" "+cmdline)
					paste.Env = env
					pasted, err := paste.CombinedOutput()
					if err == nil || !strings.Contains(string(pasted), "claim") || !strings.Contains(string(pasted), "nothing was changed") {
						t.Fatalf("pasted %q about the first attempt: %v\n%s\nwant it refused: the intent is held by another claim", line, err, pasted)
					}
					// The same for a clear written about the first attempt (the one wrap's message
					// names carries the claim as show's do).
					_, claim, _ := strings.Cut(line, " --claim ")
					claim, _, _ = strings.Cut(claim, " ")
					code, _, errOut := runCLI(t, "", "ledger", "clear", "charge:order-7", "--ledger", loc, "--claim", claim, "--reason", "no charge in the PSP", "--force")
					if code != exitError || !strings.Contains(errOut, "claimed again") || !strings.Contains(errOut, "ledger show") {
						t.Fatalf("clear --claim %s --force of the second attempt = %d %s; want it refused", claim, code, errOut)
					}
					if got := startHelper(t, "attempt", loc, effects).wait(t); got != "refused prior_failure" {
						t.Fatalf("after the paste, a duplicate got %q; want refused prior_failure (the second attempt is unchecked)", got)
					}
					if n := lines(t, effects); n != 2 {
						t.Fatalf("%d executions; want 2", n)
					}
				})
			}
		})
	}
}
