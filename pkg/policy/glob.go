package policy

import (
	"errors"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A tool pattern is a tool name, or a glob when it holds '*' (any run of characters, none
// included) or '?' (exactly one character). Nothing else is special, and the characters other
// glob dialects give meaning to are refused so that no one writes a class expecting it to work.

// checkPattern refuses patterns that cannot be meant.
func checkPattern(p string) error {
	switch {
	case p == "":
		return errors.New("an empty tool name")
	case strings.IndexFunc(p, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == '\u2800' }) >= 0:
		// U+2800, the braille blank, is drawn as a space: "charge\u2800" looked like the entry
		// of charge, and its redact kept nothing of charge's arguments out of the ledger.
		return errors.New("a tool name or glob cannot hold white space, the braille blank U+2800 or control characters")
	case strings.ContainsAny(p, `[]{}\`):
		return errors.New(`bad glob: only * (any characters) and ? (one character) are wildcards; [ ] { } and \ are not allowed`)
	case strings.Contains(p, "**"):
		return errors.New("bad glob: ** means the same as *; write *")
	}
	return nil
}

// specificity is a glob's number of literal characters ('?' counts: it fixes a position).
func specificity(p string) int { return len([]rune(p)) - strings.Count(p, "*") }

// match reports whether name matches the pattern. The name is the agent's (a tools/call's
// "name", up to a message's size), so it is read as literal characters (a '*' in it is a
// star, not a wildcard) and matched in one pass over it with no recursion and no allocation:
// after a mismatch, the last '*' of the pattern swallows one more character of the name and
// the pattern resumes after it. That costs at most len(p) steps per character of the name.
// intersect, which match used to be, recursed once per character (an 8 MB name overflowed
// the stack, a fatal error) and kept a map entry per step.
func match(p, name string) bool {
	pi, ni := 0, 0
	star, mark := -1, 0 // the pattern after its last '*' met, and where in name that '*' ends
	for ni < len(name) {
		if pi < len(p) {
			pr, pw := utf8.DecodeRuneInString(p[pi:])
			nr, nw := utf8.DecodeRuneInString(name[ni:])
			switch {
			case pr == '*':
				pi += pw
				star, mark = pi, ni
				continue
			case pr == '?' || pr == nr:
				pi, ni = pi+pw, ni+nw
				continue
			}
		}
		if star < 0 {
			return false
		}
		_, nw := utf8.DecodeRuneInString(name[mark:])
		mark += nw
		pi, ni = star, mark
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// intersect reports whether some name matches both patterns, in time linear in the two, or
// linear times the length of the shorter one when one has no '*' and is the longer in literal
// characters (never the case for two globs of one specificity, which is all Parse compares).
// With a '*' in each, a name matches both exactly when their parts before the first '*' agree
// where both have a character, and so do their parts after the last '*': the name made of the
// longer prefix, every character of both patterns between their first and last '*' and the
// longer suffix matches both, each '*' in the middle matching nothing and the outer ones the
// other pattern's part. Before 2026-12-06 intersect walked every pair of positions of the two
// with a memo of each: two globs of 12,000 characters took 15 s, and a policy file of two
// longer ones kept `policy check` and wrap's start busy for hours
// (TestLongGlobsOverlapCheckEnds).
func intersect(a, b string) bool {
	ra, rb := []rune(a), []rune(b)
	ia, ib := slices.Index(ra, '*'), slices.Index(rb, '*')
	switch {
	case ia >= 0 && ib >= 0:
		ja, jb := lastStar(ra)+1, lastStar(rb)+1
		n, m := min(ia, ib), min(len(ra)-ja, len(rb)-jb)
		return agree(ra[:n], rb[:n]) && agree(ra[len(ra)-m:], rb[len(rb)-m:])
	case ia < 0 && ib < 0:
		return len(ra) == len(rb) && agree(ra, rb)
	case ia < 0:
		ra, rb = rb, ra // ra has a '*', rb has none
	}
	// A name matching rb has its length; ra matches it with its stars matching what its
	// other characters leave. With exactly that length left, every star matches nothing.
	fixed := len(ra) - strings.Count(string(ra), "*")
	switch {
	case fixed > len(rb):
		return false
	case fixed == len(rb):
		return agree(slices.DeleteFunc(ra, func(r rune) bool { return r == '*' }), rb)
	}
	// As match does, with rb's '?' agreeing with any character of ra.
	pi, ni := 0, 0
	star, mark := -1, 0
	for ni < len(rb) {
		if pi < len(ra) {
			switch pr := ra[pi]; {
			case pr == '*':
				pi++
				star, mark = pi, ni
				continue
			case pr == '?' || rb[ni] == '?' || pr == rb[ni]:
				pi, ni = pi+1, ni+1
				continue
			}
		}
		if star < 0 {
			return false
		}
		mark++
		pi, ni = star, mark
	}
	for pi < len(ra) && ra[pi] == '*' {
		pi++
	}
	return pi == len(ra)
}

// agree reports whether a and b, of one length, agree at each position: the same character, or
// '?' on either side.
func agree(a, b []rune) bool {
	for i := range a {
		if a[i] != b[i] && a[i] != '?' && b[i] != '?' {
			return false
		}
	}
	return true
}

func lastStar(r []rune) int {
	for i := len(r) - 1; i >= 0; i-- {
		if r[i] == '*' {
			return i
		}
	}
	return -1
}
