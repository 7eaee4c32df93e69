package policy

import (
	"errors"
	"strings"
	"unicode"
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

// match reports whether name matches the pattern.
func match(p, name string) bool {
	return intersect(p, name) // a name is a pattern without wildcards
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
