package mdspan

import "testing"

// Spans as CommonMark's spec examples read them (code spans, 0.31).
func TestAt(t *testing.T) {
	for _, c := range []struct {
		text, want string
		ok         bool
	}{
		{"`foo`", "foo", true},
		{"`` foo ` bar ``", "foo ` bar", true},
		{"` `` `", "``", true},
		{"`  ``  `", " `` ", true},
		{"` a`", " a", true},
		{"`   `", "   ", true},
		{"`foo``bar``", "", false},
		{"``foo`bar`` tail", "foo`bar", true},
		{"`pay` x`", "pay", true},
		{"no span", "", false},
		{"`open", "", false},
	} {
		got, ok := At(c.text)
		if got != c.want || ok != c.ok {
			t.Errorf("At(%q) = %q, %v; want %q, %v", c.text, got, ok, c.want, c.ok)
		}
	}
}
