package policy

import (
	"slices"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/wrap"
)

const precedence = `version: 1
scope: from-file
ledger: /var/lib/effectfence/ledger.db
fence_reads: true
defaults:
  wait: 5s
  replay_window: 1h
tools:
  charge:
    key: [order]
    ignore: [note]
    redact: [card.number]
    result: hash
    replay_window: 2h
    wait: 9s
    elicit: false
  "refund_*":
    rerun_safe: true
  "list_*":
    fence: false
  balance:
    fence: true
`

func mustParse(t *testing.T, src string) *Policy {
	t.Helper()
	p, err := Parse("p.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func paths(ps []wrap.Path) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// TestResolveFileOnly: without flags every setting comes from the file.
func TestResolveFileOnly(t *testing.T) {
	r := Resolve(mustParse(t, precedence), Flags{Options: wrap.Options{Wait: wrap.DefaultWait}})
	o := r.Options
	if r.Scope != "from-file" || r.Ledger != "/var/lib/effectfence/ledger.db" || !o.FenceReads || o.Wait != 5*time.Second || o.ReplayWindow != time.Hour {
		t.Fatalf("server settings: scope %q ledger %q %+v", r.Scope, r.Ledger, o)
	}
	c := o.PerTool("charge")
	if !slices.Equal(paths(c.Key), []string{"order"}) || !slices.Equal(paths(c.Ignore), []string{"note"}) || !slices.Equal(c.Redact, []string{"card.number"}) ||
		c.KeepResult != fence.KeepHash || c.ReplayWindow != 2*time.Hour || c.Wait != 9*time.Second || !c.NoElicit || c.Fence || c.Pass || c.RerunSafe {
		t.Fatalf("charge: %+v", c)
	}
	if s := o.PerTool("refund_card"); !s.RerunSafe || s.Wait != 5*time.Second || s.ReplayWindow != time.Hour || s.NoElicit {
		t.Fatalf("refund_card: %+v", s)
	}
	if s := o.PerTool("list_orders"); !s.Pass || s.Fence {
		t.Fatalf("list_orders: %+v", s)
	}
	if s := o.PerTool("balance"); !s.Fence || s.Pass {
		t.Fatalf("balance: %+v", s)
	}
}

// TestResolveFlagsWin: each flag replaces the file's value of its setting; redact adds up.
func TestResolveFlagsWin(t *testing.T) {
	flags := wrap.Options{
		Wait: 3 * time.Second, FenceReads: false, ReplayWindow: 30 * time.Minute,
		Fence: []string{"list_orders"}, Pass: []string{"balance", "charge_x"},
		Key:       map[string][]wrap.Path{"charge": {{"customer"}}},
		Ignore:    map[string][]wrap.Path{"charge": {{"meta", "ts"}}},
		RerunSafe: []string{"charge"}, Redact: map[string][]string{"charge": {"card.cvc"}},
		KeepResult:    map[string]fence.KeepResult{"charge": fence.KeepFull},
		ReplayWindows: map[string]time.Duration{"charge": 3 * time.Hour},
	}
	r := Resolve(mustParse(t, precedence), Flags{Options: flags, Wait: true, FenceReads: true, Scope: "from-flag", Ledger: "memory"})
	o := r.Options
	if r.Scope != "from-flag" || r.Ledger != "memory" || o.FenceReads || o.Wait != 3*time.Second || o.ReplayWindow != 30*time.Minute {
		t.Fatalf("server settings: scope %q ledger %q %+v", r.Scope, r.Ledger, o)
	}
	c := o.PerTool("charge")
	if !slices.Equal(paths(c.Key), []string{"customer"}) || !slices.Equal(paths(c.Ignore), []string{"meta.ts"}) ||
		!slices.Equal(c.Redact, []string{"card.number", "card.cvc"}) || c.KeepResult != fence.KeepFull ||
		c.ReplayWindow != 3*time.Hour || c.Wait != 3*time.Second || !c.RerunSafe {
		t.Fatalf("charge: %+v", c)
	}
	if s := o.PerTool("list_orders"); !s.Fence || s.Pass {
		t.Fatalf("--fence beats the file's fence: false: %+v", s)
	}
	if s := o.PerTool("balance"); !s.Pass {
		t.Fatalf("--pass beats the file's fence: true: %+v", s)
	}
	if s := o.PerTool("refund_card"); s.ReplayWindow != 30*time.Minute || s.Wait != 3*time.Second {
		t.Fatalf("the server-wide flags beat the file's defaults: %+v", s)
	}
}

func TestResolveNoPolicy(t *testing.T) {
	flags := wrap.Options{Wait: time.Second, Fence: []string{"x"}}
	r := Resolve(nil, Flags{Options: flags, Scope: "s"})
	if r.Options.PerTool != nil || r.Scope != "s" || r.Options.Wait != time.Second {
		t.Fatalf("%+v", r)
	}
}

// TestResolveServerWideFlagsBeatPerToolValues: docs/policy.md, "a server-wide flag replaces the
// file's value everywhere, per-tool values included": --replay-window DUR and --wait replace a
// tool's own replay_window and wait in the file, not only the defaults.
func TestResolveServerWideFlagsBeatPerToolValues(t *testing.T) {
	flags := wrap.Options{Wait: 3 * time.Second, ReplayWindow: 30 * time.Minute}
	c := Resolve(mustParse(t, precedence), Flags{Options: flags, Wait: true}).Options.PerTool("charge")
	if c.ReplayWindow != 30*time.Minute || c.Wait != 3*time.Second {
		t.Fatalf("charge (replay_window: 2h, wait: 9s in the file) under --replay-window 30m --wait 3s: window %v, wait %v", c.ReplayWindow, c.Wait)
	}
}

// TestEntriesDoNotInherit: docs/policy.md, "entries do not inherit from less specific globs":
// the tool charge_card_eu takes only its own entry ("charge_card_*") and defaults, so neither
// rerun_safe of "charge_*" (a lapsed claim run again) nor fence: false of "*" (no fence at all)
// reaches it; a tool only "*" matches passes through.
func TestEntriesDoNotInherit(t *testing.T) {
	p := mustParse(t, "version: 1\ndefaults:\n  wait: 5s\ntools:\n  \"*\": {fence: false}\n  \"charge_*\": {rerun_safe: true, result: hash}\n  \"charge_card_*\": {wait: 3s}\n")
	s := Resolve(p, Flags{}).Options.PerTool("charge_card_eu")
	if s.Pass || s.Fence || s.RerunSafe || s.KeepResult != "" || s.Wait != 3*time.Second {
		t.Fatalf("charge_card_eu took settings of less specific globs: %+v", s)
	}
	if s := Resolve(p, Flags{}).Options.PerTool("refund"); !s.Pass || s.Wait != 5*time.Second {
		t.Fatalf("refund (only \"*\" matches): %+v", s)
	}
}
