package main

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fatih/color"
	"github.com/olekukonko/tablewriter"

	"github.com/effectfence/effectfence/internal/safetext"
)

// TestStreamTableMatchesTablewriter: the table `ledger ls` writes a row at a time is, byte for
// byte, the table tablewriter writes holding every row (as ls did before, and as show, verify
// and stats still do), for cells of every kind a ledger's text gives once escaped: wide (CJK,
// emoji, a joined emoji sequence), combining and zero-width characters, ambiguous-width ones,
// the spaces tablewriter trims (NBSP, ideographic space) at a cell's ends and inside, escapes,
// coloured states (whose colour sequences take no width), empty cells, and cells wider than
// the header.
func TestStreamTableMatchesTablewriter(t *testing.T) {
	atoms := []string{"a", "Z", "7", " ", "  ", "_", ".", "/", "-", ":", "\u00a0", "\u3000", "\u2003", "\u200b",
		"日本", "한", "Ａ", "😀", "👩\u200d👩\u200d👧", "e\u0301", "±", "°", "→", "─", "│", "…", `\`, "ß", "İ"}
	hostile := []string{"\x1b]0;pwned\x07", "a\u202eb", "\r", "\t", "x\u009b2J", "\xff\xfe"}
	rng := rand.New(rand.NewPCG(7, 11))
	cell := func() string {
		var b strings.Builder
		for range rng.IntN(12) {
			if rng.IntN(8) == 0 {
				b.WriteString(hostile[rng.IntN(len(hostile))])
			} else {
				b.WriteString(atoms[rng.IntN(len(atoms))])
			}
		}
		s := b.String()
		if rng.IntN(3) == 0 {
			return safetext.Clip(s, 1+rng.IntN(8)) // as ls shortens on a terminal
		}
		return safetext.Escape(s)
	}
	on := painter{on: true}
	states := []string{on.paint("done", color.FgGreen), on.paint("unknown", color.FgRed, color.Bold), "failed", "in_flight", `forged\x1b[2J`}
	for trial := range 300 {
		var rows [][]string
		for range 1 + rng.IntN(6) {
			row := make([]string, len(lsHeader))
			for i := range row {
				row[i] = cell()
				if rng.IntN(5) == 0 {
					row[i] = strings.Repeat("w", 10+rng.IntN(30)) // wider than its header
				}
			}
			row[1] = states[rng.IntN(len(states))]
			rows = append(rows, row)
		}
		var want bytes.Buffer
		tb := tablewriter.NewTable(&want)
		tb.Header(lsHeader)
		for _, r := range rows {
			if err := tb.Append(r); err != nil {
				t.Fatal(err)
			}
		}
		if err := tb.Render(); err != nil {
			t.Fatal(err)
		}
		st := newStreamTable(lsHeader...)
		for _, r := range rows {
			st.measure(r...)
		}
		var got bytes.Buffer
		if err := st.head(&got); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if err := st.row(&got, r...); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.foot(&got); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("trial %d: rows %q\nstreamed:\n%s\ntablewriter:\n%s", trial, rows, got.String(), want.String())
		}
	}
}
