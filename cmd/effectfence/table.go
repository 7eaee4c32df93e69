package main

import (
	"io"
	"strings"

	"github.com/olekukonko/tablewriter/pkg/twwidth"
	"github.com/olekukonko/tablewriter/tw"
)

// streamTable writes a table that looks exactly as tablewriter's default table
// (tablewriter.NewTable(w) with Header, Append and Render) a row at a time, from column widths
// measured beforehand: a view whose rows are too many to hold (`ledger ls` of a busy ledger)
// measures every row in a first pass and writes them in a second. tablewriter needs every row
// at once to find its widths; so does its streaming mode, which takes its widths from the first
// row it is given. TestStreamTableMatchesTablewriter compares the two byte for byte.
//
// Cells are one line each, as the views make them (escaped: no newline, tab or other control
// character; the painter's colour sequences are not counted in a cell's width, as tablewriter
// does not count them).
type streamTable struct {
	header []string // as tablewriter shows a header: auto-formatted (upper case, "_" as " ")
	widths []int    // the widest cell of each column, header included, in display columns
}

// newStreamTable starts the measure of a table with these column headers.
func newStreamTable(header ...string) *streamTable {
	t := &streamTable{header: make([]string, len(header)), widths: make([]int, len(header))}
	for i, h := range header {
		// tablewriter's header formatting (Header.Formatting.AutoFormat, on by default).
		t.header[i] = tw.Title(strings.Join(tw.SplitCamelCase(strings.TrimSpace(h)), tw.Space))
		t.widths[i] = cellWidth(t.header[i])
	}
	return t
}

// cellWidth is the display width tablewriter gives a cell: without the spaces it trims
// (Behavior.TrimSpace), by its own width function (without its cache, which would keep up to
// 8,192 cells of any length).
func cellWidth(s string) int { return twwidth.WidthNoCache(s) }

// measure widens the columns to hold row.
func (t *streamTable) measure(row ...string) {
	for i, c := range row {
		if i < len(t.widths) {
			t.widths[i] = max(t.widths[i], cellWidth(strings.TrimSpace(c)))
		}
	}
}

// rule writes a horizontal rule: left, then each column's width (with its padding) of "─"
// joined by mid, then right.
func (t *streamTable) rule(b *strings.Builder, left, mid, right string) {
	b.WriteString(left)
	for i, w := range t.widths {
		if i > 0 {
			b.WriteString(mid)
		}
		b.WriteString(strings.Repeat("─", w+2))
	}
	b.WriteString(right)
	b.WriteByte('\n')
}

// line writes one line of cells, each padded by a space either side and aligned in its column.
func (t *streamTable) line(b *strings.Builder, cells []string, center bool) {
	b.WriteString("│")
	for i, w := range t.widths {
		c := ""
		if i < len(cells) {
			c = strings.TrimSpace(cells[i])
		}
		gap := max(w-cellWidth(c), 0)
		left := 0
		if center {
			left = gap / 2 // the odd space goes right, as tablewriter centres
		}
		b.WriteString(" ")
		b.WriteString(strings.Repeat(" ", left))
		b.WriteString(c)
		b.WriteString(strings.Repeat(" ", gap-left))
		b.WriteString(" │")
	}
	b.WriteByte('\n')
}

// head writes the top border, the header and the rule under it.
func (t *streamTable) head(w io.Writer) error {
	var b strings.Builder
	t.rule(&b, "┌", "┬", "┐")
	t.line(&b, t.header, true)
	t.rule(&b, "├", "┼", "┤")
	_, err := io.WriteString(w, b.String())
	return err
}

// row writes one row, in the widths measured: a row wider than its measure would break the
// table's alignment (it is written whole, never cut).
func (t *streamTable) row(w io.Writer, cells ...string) error {
	var b strings.Builder
	t.line(&b, cells, false)
	_, err := io.WriteString(w, b.String())
	return err
}

// foot writes the bottom border.
func (t *streamTable) foot(w io.Writer) error {
	var b strings.Builder
	t.rule(&b, "└", "┴", "┘")
	_, err := io.WriteString(w, b.String())
	return err
}
