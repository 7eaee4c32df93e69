package policy

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestMatchAgreesWithIntersect: for names without wildcards, match says what intersect (the
// matcher it replaced, still used for two patterns) says, over random patterns and names with
// multi-byte and invalid UTF-8 characters.
func TestMatchAgreesWithIntersect(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 2026))
	pick := func(alphabet []string, n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	pat := []string{"a", "b", "é", "*", "?", "?"}
	nam := []string{"a", "b", "é", "\xff", "ab"}
	for range 20000 {
		p := pick(pat, r.IntN(7))
		if checkPattern(p) != nil {
			continue
		}
		name := pick(nam, r.IntN(9))
		if got, want := match(p, name), intersect(p, name); got != want {
			t.Fatalf("match(%q, %q) = %v, intersect says %v", p, name, got, want)
		}
	}
}

// TestMatchLongName: a tool name is the agent's, as long as a message. Matching it against a
// glob takes no memory and no recursion (the recursive matcher allocated about 220 bytes per
// character of the name, 1 MB took a second, and an 8 MB name overflowed the stack and killed
// the process). A '*' or '?' in a name is the character, not a wildcard.
func TestMatchLongName(t *testing.T) {
	long := "db_" + strings.Repeat("a", 1<<20)
	for _, c := range []struct {
		p, name string
		want    bool
	}{
		{"*", long, true}, {"db_*", long, true}, {"db_*b", long, false}, {"*a?a*", long, true},
		{"d*a*a*a*b", long, false}, {"?x_*", long, false}, {"?b_*", long, true},
		{"db_*y", "db_*", false}, {"db_?", "db_*", true}, {"db_x", "db_?", false},
	} {
		var got bool
		// AllocsPerRun counts the whole process's allocations, the runtime's and the race
		// detector's included (CI once saw 1 in a single run): over 10 runs a stray one
		// rounds away, and an allocation by match itself does not.
		if allocs := testing.AllocsPerRun(10, func() { got = match(c.p, c.name) }); allocs != 0 {
			t.Errorf("match(%q, name of %d bytes) made %v allocations, want none", c.p, len(c.name), allocs)
		}
		if got != c.want {
			t.Errorf("match(%q, %.20q) = %v, want %v", c.p, c.name, got, c.want)
		}
	}
}

// TestPerToolKeepsNoAgentNames: the settings of tools named by the agent are not kept for
// names of any length: 64 calls of distinct 1 MB names kept 64 MB until the wrap process
// ended. Their settings are still those of the entry they match.
func TestPerToolKeepsNoAgentNames(t *testing.T) {
	r := Resolve(mustParse(t, precedence), Flags{})
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range 64 {
		name := "refund_" + strings.Repeat(string(rune('a'+i%26)), 1<<20) + strconv.Itoa(i)
		if s := r.Options.PerTool(name); !s.RerunSafe {
			t.Fatalf("a refund_* tool: %+v, want rerun-safe", s)
		}
	}
	after := heap()
	runtime.KeepAlive(r)
	if after > before && after-before > 8<<20 {
		t.Fatalf("64 tool names of 1 MB left %d bytes in use", after-before)
	}
	if s := r.Options.PerTool("refund_x"); !s.RerunSafe {
		t.Fatalf("refund_x: %+v", s)
	}
}

// TestLongGlobsOverlapCheckEnds: two globs of one specificity whose literal prefixes and
// suffixes agree are compared with intersect, which walked every pair of positions of the two
// with a memo of each: "a…a*b…b" against "a…aa…a*b…b", 12,000 characters each, took 15 s and
// a million map entries per 100 characters squared, so a policy file of two such globs
// (120 KB, well under the 1 MiB bound) kept `policy check` and wrap's start busy for hours.
// The two can match one tool and must still be refused.
func TestLongGlobsOverlapCheckEnds(t *testing.T) {
	n := 40000
	a := strings.Repeat("a", n) + "*" + strings.Repeat("b", 2*n)
	b := strings.Repeat("a", 2*n) + "*" + strings.Repeat("b", n)
	src := fmt.Sprintf("version: 1\ntools:\n  %q: {wait: 1s}\n  %q: {wait: 2s}\n", a, b)
	_, err := Parse("p.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "can match the same tool") {
		t.Fatalf("two globs that match %q…: got %.200v; want them refused as equally specific", a[:10], err)
	}
}

// intersectByWalk is the intersect policy used until 2026-12-06: a walk over every pair of
// positions of the two patterns. It is right, and slow (TestLongGlobsOverlapCheckEnds); it
// stays here to check intersect against.
func intersectByWalk(a, b string) bool {
	ra, rb := []rune(a), []rune(b)
	memo := map[[2]int]bool{}
	var walk func(i, j int) bool
	walk = func(i, j int) bool {
		k := [2]int{i, j}
		if v, ok := memo[k]; ok {
			return v
		}
		var ok bool
		switch {
		case i < len(ra) && ra[i] == '*':
			ok = walk(i+1, j) || j < len(rb) && walk(i, j+1)
		case j < len(rb) && rb[j] == '*':
			ok = walk(i, j+1) || i < len(ra) && walk(i+1, j)
		case i == len(ra) || j == len(rb):
			ok = i == len(ra) && j == len(rb)
		default:
			ok = (ra[i] == rb[j] || ra[i] == '?' || rb[j] == '?') && walk(i+1, j+1)
		}
		memo[k] = ok
		return ok
	}
	return walk(0, 0)
}

// TestIntersectAgreesWithTheWalk: intersect says what the walk it replaced says, over random
// pairs of patterns with multi-byte and invalid UTF-8 characters.
func TestIntersectAgreesWithTheWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(12, 2026))
	pick := func(n int) string {
		alphabet := []string{"a", "b", "é", "\xff", "*", "?", "?"}
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	for range 200000 {
		a, b := pick(r.IntN(8)), pick(r.IntN(8))
		if got, want := intersect(a, b), intersectByWalk(a, b); got != want {
			t.Fatalf("intersect(%q, %q) = %v, the walk says %v", a, b, got, want)
		}
	}
}
