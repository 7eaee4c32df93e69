package wrap_test

import (
	"context"
	"strings"
	"testing"
)

// A setting that names a tool the server does not list applies to no call: a misspelt name in
// a policy entry (redact: [card] under "chrage") or a per-tool flag (--redact chrage:card)
// leaves the real tool's card numbers in the ledger, and nothing said so. Wrap logs each such
// name once, when it knows the server's whole listing (its own listing at the first call, or
// the agent's one-page tools/list); names the server lists, and globs, are not named.
func TestSettingsNamingAnUnlistedToolAreLogged(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	path := writePolicy(t, r, `version: 1
tools:
  charge:
    key: [amount]
  chrage:
    redact: [card]
  "bal*":
    fence: true
  "nope_*":
    fence: true
`)
	w := r.wrap("--policy", path, "--redact", "chrage:card", "--keep-result", "refnud=hash", "--redact", "charge:card")
	if x := call(t, w.Session, "charge", `{"amount":5,"card":"4242"}`); x.IsError {
		t.Fatalf("charge: %s", x.text())
	}
	wants := []string{
		`the policy entry at ` + path + `:5:3 names the tool "chrage", which the server does not list: it applies to no call`,
		`--redact names the tool "chrage", which the server does not list`,
		`--keep-result names the tool "refnud", which the server does not list`,
	}
	waitFor(t, "wrap to name the settings of unlisted tools", func() bool {
		log := w.log.String()
		for _, want := range wants {
			if !strings.Contains(log, want) {
				return false
			}
		}
		return true
	})
	// The agent lists the tools itself (one page): the same names are not logged again.
	if _, err := w.ListTools(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	if x := call(t, w.Session, "charge", `{"amount":6}`); x.IsError {
		t.Fatalf("charge: %s", x.text())
	}
	log := w.log.String()
	if n := strings.Count(log, "which the server does not list"); n != len(wants) {
		t.Fatalf("%d lines naming unlisted tools, want %d (each once; never charge, nor a glob):\n%s", n, len(wants), log)
	}
	if strings.Contains(log, `tool "charge", which`) || strings.Contains(log, `"nope_*", which`) {
		t.Fatalf("a listed tool or a glob was named:\n%s", log)
	}
}

// With the agent's own one-page tools/list before any call, the names are checked from it.
func TestSettingsNamingAnUnlistedToolAreLoggedFromTheAgentsListing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--fence", "balanse")
	if _, err := w.ListTools(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "wrap to name --fence balanse", func() bool {
		return strings.Contains(w.log.String(), `--fence names the tool "balanse", which the server does not list`)
	})
}
