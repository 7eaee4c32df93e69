package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// docDefault reads a stated default out of a doc: every match of pattern (whose first group
// is the value) in path. A doc sentence reworded so that the pattern no longer matches fails
// the test, so the sentence and its check change together.
func docDefault(t *testing.T, path, pattern string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Fatalf("%s no longer states this default (no match of %q)", path, pattern)
	}
	return out
}

// helpDefaults runs the real binary's `effectfence CMD --help` and returns, per flag, the
// default its line states: the last "(default: X)" or "(default X)", and for serve's
// "(default: $ENV, else X)" the X.
func helpDefaults(t *testing.T, cmd string) map[string]string {
	t.Helper()
	r := runBinary(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "", cmd, "--help")
	if r.code != exitOK {
		t.Fatalf("effectfence %s --help: exit %d, stderr %q", cmd, r.code, r.stderr)
	}
	flag := regexp.MustCompile(`^\s+--([a-z][a-z-]*)`)
	def := regexp.MustCompile(`\(default:? ([^()]*)\)`)
	out := map[string]string{}
	for line := range strings.SplitSeq(r.stdout, "\n") {
		f := flag.FindStringSubmatch(line)
		if f == nil {
			continue
		}
		ds := def.FindAllStringSubmatch(line, -1)
		if ds == nil {
			continue
		}
		v := ds[len(ds)-1][1]
		if _, after, ok := strings.Cut(v, ", else "); ok {
			v = after
		}
		out[f[1]] = strings.Trim(v, `"`)
	}
	return out
}

// normDefault puts a default as a doc or --help writes it ("30 s", "30s", "1m0s", "10
// minutes", "1 min", "24 h", "86400", "fence") in one form: a duration for a number with a
// unit (or any number when secs: a flag counted in seconds), a number, or the word itself.
func normDefault(v string, secs bool) string {
	v = strings.Join(strings.Fields(v), " ")
	m := regexp.MustCompile(`^(\d+(?:\.\d+)?) ?(ms|s|min|minutes?|m|h|hours?|d|days?)?$`).FindStringSubmatch(v)
	if m == nil {
		if d, err := time.ParseDuration(v); err == nil {
			return d.String()
		}
		return v
	}
	n, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "min": time.Minute, "minute": time.Minute,
		"minutes": time.Minute, "m": time.Minute, "h": time.Hour, "hour": time.Hour, "hours": time.Hour, "d": 24 * time.Hour,
		"day": 24 * time.Hour, "days": 24 * time.Hour}[m[2]]
	if unit == 0 {
		if !secs {
			return strconv.FormatFloat(n, 'f', -1, 64)
		}
		unit = time.Second
	}
	return time.Duration(n * float64(unit)).String()
}

// TestHelpStatesTheDocumentedDefaults runs the real binary: every default README.md or a doc
// states for a flag is the default its --help states. For the flags whose default is their
// value (--wait, --grace, --max-concurrent, --init-timeout, --body-timeout, probe's and
// scan's) the help line prints the value in force, so a constant changed in the code fails
// here; for --lease-secs, --result-ttl-secs and --on-lease-expiry the help text is written
// apart from the value in force, which the end-to-end tests hold (TestDefaultsInForce in
// pkg/wrap, TestServeDefaultsInForce).
func TestHelpStatesTheDocumentedDefaults(t *testing.T) {
	t.Parallel()
	const (
		wrapMD    = "../../docs/wrap.md"
		identity  = "../../docs/identity.md"
		policyMD  = "../../docs/policy.md"
		gateway   = "../../docs/gateway.md"
		privacy   = "../../docs/privacy.md"
		ledgerMD  = "../../docs/ledger.md"
		reliab    = "../../docs/RELIABILITY.md"
		serveMD   = "../../docs/serve.md"
		probeMD   = "../../docs/probe-and-demo.md"
		scanMD    = "../../docs/scan.md"
		readme    = "../../README.md"
		secs, raw = true, false
	)
	type stated struct{ path, pattern string }
	cases := []struct {
		cmd, flag string
		secs      bool
		docs      []stated
	}{
		{"wrap", "wait", raw, []stated{
			{wrapMD, "\\(`--wait`,\\s+default ([0-9]+ s)\\)"},
			{policyMD, "\\| `wait` \\|[^|]*\\| ([^ |]+) \\|"},
		}},
		{"wrap", "replay-window", raw, []stated{
			{wrapMD, "\\(`--replay-window`, default ([0-9]+ min)\\)"},
			{identity, "replay window per tool, ([0-9]+ minutes) by\\s+default"},
			{identity, "\\(`--replay-window ([0-9]+m)` for every tool"},
			{policyMD, "\\| `replay_window` \\|[^|]*\\| ([^ |]+) \\|"},
		}},
		{"wrap", "lease-secs", secs, []stated{
			{wrapMD, "`--lease-secs`\\s+\\(([0-9]+);"},
			{gateway, "\\(`--lease-secs`, default\\s+([0-9]+ s)\\)"},
			{readme, "`EFFECTFENCE_LEASE_SECS` \\(([0-9]+)\\)"},
		}},
		{"wrap", "result-ttl-secs", secs, []stated{
			{wrapMD, "`--result-ttl-secs` \\(([0-9]+);"},
			{privacy, "\\(default ([0-9]+) = 24 h\\)"},
			{privacy, "\\(default [0-9]+ = ([0-9]+ h)\\)"},
			{ledgerMD, "`EFFECTFENCE_RESULT_TTL_SECS`, default ([0-9]+ h)\\)"},
			{identity, "the whole result TTL \\(`EFFECTFENCE_RESULT_TTL_SECS`, ([0-9]+ h)\\)"},
			{readme, "`EFFECTFENCE_RESULT_TTL_SECS`\\s+\\(([0-9]+)\\) tune leases"},
			{readme, "`EFFECTFENCE_RESULT_TTL_SECS`\\s+\\(([0-9]+ h)\\) and then swept"},
		}},
		{"wrap", "max-concurrent", raw, []stated{{wrapMD, "`--max-concurrent` \\(([0-9]+) requests"}}},
		{"wrap", "init-timeout", raw, []stated{{wrapMD, "`--init-timeout` \\(([0-9a-z]+)\\)"}}},
		{"wrap", "grace", raw, []stated{
			{wrapMD, "`--grace` \\(default ([0-9a-z]+)\\)"},
			{wrapMD, "`--grace` \\(([0-9a-z]+)\\)"},
		}},
		{"wrap", "on-lease-expiry", raw, []stated{
			{reliab, "The default, `([a-z]+)`, records none"},
			{serveMD, "\\(the\\s+default, `([a-z]+)`\\)"},
		}},
		{"wrap", "body-timeout", raw, []stated{
			{gateway, "\\(default ([0-9a-z]+): the largest message"},
			{gateway, "`--body-timeout` \\(([0-9]+ s)\\)"},
		}},
		// serve's ledger settings are the ledger's: the same defaults as wrap's.
		{"serve", "lease-secs", secs, []stated{{wrapMD, "`--lease-secs`\\s+\\(([0-9]+);"}}},
		{"serve", "result-ttl-secs", secs, []stated{{privacy, "\\(default ([0-9]+) = 24 h\\)"}}},
		{"serve", "on-lease-expiry", raw, []stated{{serveMD, "\\(the\\s+default, `([a-z]+)`\\)"}}},
		{"probe", "retry-after", raw, []stated{{probeMD, "`--retry-after` \\(default ([0-9]+ s)\\)"}}},
		{"probe", "timeout", raw, []stated{{probeMD, "`--timeout`\\s+\\(default ([0-9]+ min)\\)"}}},
		{"probe", "pattern", raw, []stated{{probeMD, "`--pattern ([a-z]+)` \\(the default\\)"}}},
		{"probe", "witness-kind", raw, []stated{{probeMD, "`--witness-kind ([a-z]+)` \\(the default"}}},
		{"scan", "run-timeout", raw, []stated{{scanMD, "`--run-timeout`, default ([0-9]+ s)"}}},
	}
	help := map[string]map[string]string{}
	for _, c := range cases {
		if help[c.cmd] == nil {
			help[c.cmd] = helpDefaults(t, c.cmd)
		}
		h, ok := help[c.cmd][c.flag]
		if !ok {
			t.Errorf("effectfence %s --help states no default for --%s", c.cmd, c.flag)
			continue
		}
		for _, d := range c.docs {
			for _, v := range docDefault(t, d.path, d.pattern) {
				if normDefault(v, c.secs) != normDefault(h, c.secs) {
					t.Errorf("--%s: %s states the default %q, `effectfence %s --help` states %q", c.flag, strings.TrimPrefix(d.path, "../../"), v, c.cmd, h)
				}
			}
		}
	}
}
