package wrap

import (
	"fmt"
	"slices"
	"sort"
)

// NamedTool is a tool name a setting names exactly, and where the setting is written.
type NamedTool struct {
	// Name is the tool's name as the setting spells it.
	Name string
	// Where says where the setting is written, for the message: "--redact",
	// "policy.yaml:7:3", ...
	Where string
}

// named checks the names that settings spell exactly against the server's listing: a
// misspelt name applies its settings to no call (its redaction, its key, its
// keep_result: hash), and nothing else would say so. Each name the server does not list is
// logged once per process (the sessions of a front share told), when a whole listing is known.
type named struct {
	tools []NamedTool
	told  *said
}

// namedTools lists the names the per-tool options of opt spell, and Options.Named.
func namedTools(opt Options) []NamedTool {
	var out []NamedTool
	add := func(where string, names ...string) {
		for _, n := range names {
			out = append(out, NamedTool{Name: n, Where: where})
		}
	}
	keys := func(m any) []string {
		var ks []string
		switch m := m.(type) {
		case map[string][]Path:
			for k := range m {
				ks = append(ks, k)
			}
		case map[string][]string:
			for k := range m {
				ks = append(ks, k)
			}
		}
		sort.Strings(ks)
		return ks
	}
	add("--fence", opt.Fence...)
	add("--pass", opt.Pass...)
	add("--key", keys(opt.Key)...)
	add("--ignore-field", keys(opt.Ignore)...)
	add("--redact", keys(opt.Redact)...)
	add("--rerun-safe", opt.RerunSafe...)
	var keep, windows, elicit []string
	for k := range opt.KeepResult {
		keep = append(keep, k)
	}
	for k := range opt.ReplayWindows {
		windows = append(windows, k)
	}
	for k := range opt.NoElicit {
		elicit = append(elicit, k)
	}
	slices.Sort(keep)
	slices.Sort(windows)
	slices.Sort(elicit)
	add("--keep-result", keep...)
	add("--replay-window", windows...)
	add("no elicitation", elicit...)
	return append(out, opt.Named...)
}

// listed checks the names against a whole listing of the server's tools and logs each it does
// not list, once.
func (n *named) listed(tools map[string]toolInfo, logf func(string, ...any)) {
	for _, t := range n.tools {
		if _, ok := tools[t.Name]; ok || !n.told.first(t.Name+"\x00"+t.Where) {
			continue
		}
		logf("%s", fmt.Sprintf("%s names the tool %q, which the server does not list: it applies to no call (is the name misspelt?)", t.Where, t.Name))
	}
}
