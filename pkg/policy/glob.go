package policy

import (
	"errors"
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
	case strings.IndexFunc(p, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		return errors.New("a tool name or glob cannot hold white space or control characters")
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

// intersect reports whether some name matches both patterns. It walks both at once: a '*' may
// end, or swallow the other side's next element (a character, '?' or all of the other's '*').
func intersect(a, b string) bool {
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
