// Package hide takes redacted argument values out of text a server wrote (an error message, the
// tail of its stderr) before wrap records that text in the ledger.
package hide

import "strings"

// Redacted is what a value taken out is replaced by: fence.Redacted's spelling (this package
// sits below mcpstdio, which does not import the engine).
const Redacted = "[redacted]"

// Replace replaces every occurrence of texts in s with Redacted. texts must be longest first,
// so that a value is replaced whole before a shorter one inside it.
func Replace(s string, texts []string) string {
	for _, t := range texts {
		if t != "" {
			s = strings.ReplaceAll(s, t, Redacted)
		}
	}
	return s
}

// Edges is Replace for a piece of a longer text: the last bytes of a stream (a child's stderr,
// kept up to a bound), where a value can stand in part. Where the piece ends, the end of s
// that is the beginning of a text (the writer stopped half way through the value) is replaced;
// and, when cut is set (the piece lost what came before it), so is the beginning of s that is
// part of a text (the cut fell inside the value). A part as short as one byte is replaced
// too: a byte too many taken out of the server's words costs less than a value left in them.
func Edges(s string, texts []string, cut bool) string {
	head, tail := 0, 0 // how many bytes at s's start and end are part of a value
	for _, t := range texts {
		if t == "" {
			continue
		}
		if cut {
			head = max(head, prefixInside(s, t))
		}
		tail = max(tail, suffixStarting(s, t))
	}
	if head+tail >= len(s) {
		if head+tail == 0 {
			return s
		}
		return Redacted
	}
	mid := Replace(s[head:len(s)-tail], texts)
	if head > 0 {
		mid = Redacted + mid
	}
	if tail > 0 {
		mid += Redacted
	}
	return mid
}

// prefixInside returns the length of the longest beginning of s found anywhere in t. A shorter
// beginning of a found one is found too, so the length is searched by halves.
func prefixInside(s, t string) int {
	lo, hi := 0, min(len(s), len(t)) // s[:lo] is in t; s[:hi+1] is not, or beyond
	for lo < hi {
		m := lo + (hi-lo+1)/2
		if strings.Contains(t, s[:m]) {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo
}

// suffixStarting returns the length of the longest end of s that is a beginning of t, shorter
// than t (t whole is Replace's).
func suffixStarting(s, t string) int {
	for k := min(len(s), len(t)-1); k > 0; k-- {
		if strings.HasSuffix(s, t[:k]) {
			return k
		}
	}
	return 0
}
