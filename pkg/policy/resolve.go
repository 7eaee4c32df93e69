package policy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// Entry returns the entry that applies to tool: the one naming it exactly, else the matching
// glob with the most literal characters (Parse refused equally specific globs that overlap),
// else nil.
func (p *Policy) Entry(tool string) *Entry {
	var best *Entry
	for i := range p.Tools {
		e := &p.Tools[i]
		if !e.Glob() {
			if e.Pattern == tool {
				return e
			}
			continue
		}
		if match(e.Pattern, tool) && (best == nil || specificity(e.Pattern) > specificity(best.Pattern)) {
			best = e
		}
	}
	return best
}

// For returns the settings of tool: its entry's (see Entry), each setting the entry leaves
// out taken from defaults; redact is the union of both.
func (p *Policy) For(tool string) ToolPolicy {
	tp := p.Defaults
	e := p.Entry(tool)
	if e == nil {
		return tp
	}
	t := e.ToolPolicy
	if t.Fence != nil {
		tp.Fence = t.Fence
	}
	if t.Key != nil {
		tp.Key = t.Key
	}
	if t.Ignore != nil {
		tp.Ignore = t.Ignore
	}
	if t.ReplayWindow > 0 {
		tp.ReplayWindow = t.ReplayWindow
	}
	if t.RerunSafe != nil {
		tp.RerunSafe = t.RerunSafe
	}
	tp.Redact = union(p.Defaults.Redact, t.Redact)
	if t.Result != "" {
		tp.Result = t.Result
	}
	if t.Wait > 0 {
		tp.Wait = t.Wait
	}
	if t.Elicit != nil {
		tp.Elicit = t.Elicit
	}
	return tp
}

// given names the settings the entry gives besides fence, as the file spells them.
func (e *Entry) given() []string {
	var out []string
	for _, g := range []struct {
		set  bool
		name string
	}{
		{e.Key != nil, "key"}, {e.Ignore != nil, "ignore"}, {e.ReplayWindow > 0, "replay_window"}, {e.RerunSafe != nil, "rerun_safe"},
		{e.Result != "", "result"}, {e.Wait > 0, "wait"}, {e.Elicit != nil, "elicit"},
	} {
		if g.set {
			out = append(out, g.name)
		}
	}
	return out
}

func union(a, b []string) []string {
	if len(b) == 0 {
		return a
	}
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Flags are what the user gave on the command line. Options holds the values of the flags as
// wrap would take them without a policy (per-tool maps and lists hold only what was given);
// the booleans say which settings with a default were given explicitly.
type Flags struct {
	Options    wrap.Options
	Wait       bool // --wait
	FenceReads bool // --fence-reads
	// Scope and Ledger are --scope and --ledger, "" when not given.
	Scope, Ledger string
}

// Resolved is what wrap runs with.
type Resolved struct {
	// Options are wrap's options: the flags', with Options.PerTool giving each tool the
	// file's settings where no flag sets them.
	Options wrap.Options
	// Scope is the scope name (wrap --scope), "" to derive it.
	Scope string
	// Ledger is the ledger (wrap --ledger), "" for the environment's or the default.
	Ledger string
	// OnUnknown is the file's hook, nil when none.
	OnUnknown *Hook

	pol   *Policy
	flags Flags
}

// LongWindows says which replay windows in effect (the file's, the flags') are longer than
// ttl, the ledger's result TTL: a done record is dropped when its TTL ends, so such a window
// is cut short to ttl without a word unless wrap says so.
func (r Resolved) LongWindows(ttl time.Duration) []string {
	var out []string
	say := func(d time.Duration, what string) {
		if d > ttl {
			out = append(out, fmt.Sprintf("replay window %s of %s is longer than the result TTL (%s): a done record is dropped when its TTL ends, so identical calls are answered for %s only; raise EFFECTFENCE_RESULT_TTL_SECS or --result-ttl-secs to %.0f for it",
				FormatDuration(d), what, FormatDuration(ttl), FormatDuration(ttl), d.Seconds()))
		}
	}
	f := r.flags.Options
	switch {
	case f.ReplayWindow > 0:
		say(f.ReplayWindow, "every tool (--replay-window)")
	case r.pol != nil && r.pol.Defaults.ReplayWindow > 0:
		say(r.pol.Defaults.ReplayWindow, "every tool (the policy's defaults)")
	default:
		// The default window is cut short too (before 2026-12-06 without a word: a TTL of a
		// minute made every replay last a minute).
		say(wrap.DefaultReplayWindow, "every tool (the default)")
	}
	if f.ReplayWindow <= 0 && r.pol != nil {
		for _, e := range r.pol.Tools {
			if _, flagged := f.ReplayWindows[e.Pattern]; !flagged {
				say(e.ReplayWindow, fmt.Sprintf("tool %q (the policy)", e.Pattern))
			}
		}
	}
	for _, tool := range slices.Sorted(maps.Keys(f.ReplayWindows)) {
		say(f.ReplayWindows[tool], fmt.Sprintf("tool %q (--replay-window)", tool))
	}
	return out
}

// Resolve folds a policy (nil: none) and the flags into wrap's options. Flags win over the
// file, setting by setting: a per-tool flag (--fence, --pass, --key, --ignore-field,
// --rerun-safe, --keep-result, --replay-window TOOL=DUR) replaces what the file says of that
// tool, and a server-wide flag (--wait, --replay-window DUR, --fence-reads, --scope, --ledger)
// replaces the file's value everywhere, per-tool ones included. Redact adds up: --redact can
// add fields to those the file redacts, never remove one.
func Resolve(p *Policy, f Flags) Resolved {
	r := Resolved{Options: f.Options, Scope: f.Scope, Ledger: f.Ledger, pol: p, flags: f}
	if p == nil {
		return r
	}
	r.OnUnknown = p.OnUnknown
	if r.Scope == "" {
		r.Scope = p.Scope
	}
	if r.Ledger == "" {
		r.Ledger = p.Ledger
	}
	opt := &r.Options
	if !f.FenceReads && p.FenceReads != nil {
		opt.FenceReads = *p.FenceReads
	}
	if !f.Wait && p.Defaults.Wait > 0 {
		opt.Wait = p.Defaults.Wait
	}
	if opt.ReplayWindow <= 0 && p.Defaults.ReplayWindow > 0 {
		opt.ReplayWindow = p.Defaults.ReplayWindow
	}
	for _, e := range p.Tools {
		if !e.Glob() {
			opt.Named = append(opt.Named, wrap.NamedTool{Name: e.Pattern, Where: fmt.Sprintf("the policy entry at %s:%d:%d", p.File, e.Line, e.Column)})
		}
	}
	flags := f.Options
	fenceSet, passSet, rerunSet := set(flags.Fence), set(flags.Pass), set(flags.RerunSafe)
	// cache maps tool -> wrap.ToolSettings: a tool's settings never change in a run. The names
	// are the agent's, any it likes, so only short ones are kept and only up to maxCached of
	// them; others are worked out again each time (a few comparisons per policy entry).
	var cache sync.Map
	var cached atomic.Int64
	opt.PerTool = func(tool string) wrap.ToolSettings {
		if s, ok := cache.Load(tool); ok {
			return s.(wrap.ToolSettings)
		}
		tp := p.For(tool)
		s := wrap.ToolSettings{Key: tp.Key, Ignore: tp.Ignore, Redact: tp.Redact, KeepResult: tp.Result, ReplayWindow: tp.ReplayWindow, Wait: tp.Wait}
		if tp.Fence != nil {
			s.Fence, s.Pass = *tp.Fence, !*tp.Fence
		}
		s.RerunSafe = tp.RerunSafe != nil && *tp.RerunSafe
		s.NoElicit = tp.Elicit != nil && !*tp.Elicit
		if fenceSet[tool] {
			s.Fence, s.Pass = true, false
		}
		if passSet[tool] {
			s.Pass = true
		}
		if k, ok := flags.Key[tool]; ok {
			s.Key = k
		}
		if ig, ok := flags.Ignore[tool]; ok {
			s.Ignore = ig
		}
		if rerunSet[tool] {
			s.RerunSafe = true
		}
		s.Redact = union(s.Redact, flags.Redact[tool])
		if k, ok := flags.KeepResult[tool]; ok {
			s.KeepResult = k
		}
		if w, ok := flags.ReplayWindows[tool]; ok {
			s.ReplayWindow = w
		} else if flags.ReplayWindow > 0 {
			s.ReplayWindow = flags.ReplayWindow
		}
		if f.Wait {
			s.Wait = flags.Wait
		}
		if flags.NoElicit[tool] {
			s.NoElicit = true
		}
		if e := p.Entry(tool); e != nil {
			s.Given = e.given()
		}
		s.Given = append(s.Given, wrap.GivenFlags(flags, tool)...)
		if len(tool) <= maxCachedName && cached.Add(1) <= maxCached {
			cache.Store(tool, s)
		}
		return s
	}
	return r
}

// maxCached and maxCachedName bound Resolve's cache of tool settings: an agent that called
// tools of a million distinct names, or of names megabytes long, kept them all in memory.
const (
	maxCached     = 4096
	maxCachedName = 256
)

func set(xs []string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}

// Summary is a one-line account of the policy, for `effectfence policy check`.
func (p *Policy) Summary() string {
	exact, globs := 0, 0
	for _, e := range p.Tools {
		if e.Glob() {
			globs++
		} else {
			exact++
		}
	}
	s := p.File + ": ok: " + plural(exact, "tool") + " by name, " + plural(globs, "glob")
	if p.Scope != "" {
		s += ", scope " + strconv.Quote(p.Scope)
	}
	if p.Ledger != "" {
		s += ", ledger set"
	}
	if p.OnUnknown != nil {
		s += ", on_unknown hook"
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
