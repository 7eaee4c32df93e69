package policy

import (
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestSchemaDurationIsTheParsers: a string the editor's schema takes for a duration is one
// ParseDuration reads, and the other way round, so that an editor never flags a file that
// `policy check` accepts (".5s", "1.s", "2μs" with the Greek mu, as Go reads them) nor passes
// one it refuses. Bounds are not the pattern's: zero and days beyond what ParseDuration takes
// are left out of the comparison.
func TestSchemaDurationIsTheParsers(t *testing.T) {
	defs := readSchema(t)["$defs"].(map[string]any)
	d := defs["duration"].(map[string]any)
	re := regexp.MustCompile(d["pattern"].(string))
	minLen := int(d["minLength"].(float64))
	schemaTakes := func(s string) bool { return utf8.RuneCountInString(s) >= minLen && re.MatchString(s) }
	check := func(s string) {
		if days, _, ok := strings.Cut(s, "d"); ok {
			if n, err := strconv.ParseUint(days, 10, 64); err == nil && n > 10000 {
				return // a bound, not a spelling
			}
		}
		v, err := ParseDuration(s)
		if err == nil && v == 0 {
			return // zero: every duration's lower bound refuses it
		}
		if got := schemaTakes(s); got != (err == nil) {
			t.Errorf("duration %q: the schema takes it %v, ParseDuration: %v", s, got, err)
		}
	}
	for _, s := range []string{"30s", "10m", "1h30m", "7d", "1d12h", ".5s", "1.s", "1.5h", "2µs", "2μs", "2us", "3ns",
		"", "0", "1", "d", "1d", "1dd", "-1s", "+1s", "1d-1s", "s", ".s", "1.5", "1e3s", "1 s", "1S", "1d1d"} {
		check(s)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"0", "1", "9", ".", "d", "n", "s", "u", "µ", "μ", "m", "h", "+", "-"}
	for range 200000 {
		var b strings.Builder
		for range 1 + rng.IntN(7) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		check(b.String())
	}
}
