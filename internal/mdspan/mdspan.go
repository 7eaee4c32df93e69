// Package mdspan reads Markdown code spans as a CommonMark renderer does, for tests that check
// what a client shows of a command put in one (fence.CodeSpan).
package mdspan

import "strings"

// At reads the code span that text begins with: a run of n backquotes opens it, the next run
// of exactly n closes it, and one space is stripped from each end of the content when both
// ends have one and it is not all spaces. Line endings are kept (a renderer shows them as
// spaces). ok is false when text does not begin with a closed span.
func At(text string) (content string, ok bool) {
	n := len(text) - len(strings.TrimLeft(text, "`"))
	if n == 0 {
		return "", false
	}
	for i := n; i < len(text); {
		if text[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(text) && text[j] == '`' {
			j++
		}
		if j-i == n {
			c := text[n:i]
			if len(c) >= 2 && c[0] == ' ' && c[len(c)-1] == ' ' && strings.Trim(c, " ") != "" {
				c = c[1 : len(c)-1]
			}
			return c, true
		}
		i = j
	}
	return "", false
}

// After reads the code span that follows the first prefix in text that a span follows.
func After(text, prefix string) (content string, ok bool) {
	for {
		_, rest, found := strings.Cut(text, prefix)
		if !found {
			return "", false
		}
		if strings.HasPrefix(rest, "`") {
			return At(rest)
		}
		text = rest
	}
}
