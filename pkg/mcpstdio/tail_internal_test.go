package mcpstdio

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTailHidesWhatItWasGiven: the tail of a child's stderr shows the hidden texts as
// [redacted], also the end of one whose beginning the tail lost; given more texts than it
// keeps, it shows none of the stderr rather than what it can no longer take out.
func TestTailHidesWhatItWasGiven(t *testing.T) {
	tw := &tailWriter{w: io.Discard, max: 64}
	tw.hide([]string{"4111222233334444"})
	_, _ = tw.Write([]byte("handling card 4111222233334444\n" + strings.Repeat("y", 30) + " 4111222233334444 again\n"))
	if got := tw.String(); strings.Contains(got, "4444") || !strings.HasPrefix(got, "[redacted]") || !strings.Contains(got, " [redacted] again") {
		t.Errorf("tail %q; want every part of the value taken out", got)
	}

	tw = &tailWriter{w: io.Discard, max: 64}
	for i := 0; i <= maxHidden/1024; i++ {
		tw.hide([]string{fmt.Sprintf("%04d", i) + strings.Repeat("a", 1020)})
	}
	_, _ = tw.Write([]byte("card 4111222233334444\n"))
	if got := tw.String(); strings.Contains(got, "4111") || !strings.Contains(got, "not shown") {
		t.Errorf("tail past maxHidden: %q; want it withheld", got)
	}
}

// TestTailTakesManyTextsAtOnce: a call whose redacted value holds many short texts (an array
// of 170,000 distinct numbers, about 1 MB, within maxHidden) hands them all to the tail
// before it is sent, longest first as wrap gives them. Each was inserted at the start of the
// texts of its length, shifting all the others: 27 s on a shared machine, with the tail's lock
// held and so the child's stderr unread (a child that writes to it stops), before the call was
// sent. The texts are kept longest first, every one of them still taken out.
func TestTailTakesManyTextsAtOnce(t *testing.T) {
	tw := &tailWriter{w: io.Discard, max: 2048}
	texts := make([]string, 0, 170_000)
	for i := 100_000; len(texts) < cap(texts); i++ {
		texts = append(texts, strconv.Itoa(i))
	}
	start := time.Now()
	tw.hide([]string{"4111222233334444"})
	tw.hide(texts)
	tw.hide([]string{"12345678", "1234567", "123"})
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("hiding %d texts took %v", len(texts)+4, took)
	}
	if len(tw.hidden) != len(texts)+4 || !slices.IsSortedFunc(tw.hidden, func(a, b string) int { return len(b) - len(a) }) {
		t.Fatalf("%d texts kept (want %d), longest first: %v", len(tw.hidden), len(texts)+4, slices.IsSortedFunc(tw.hidden, func(a, b string) int { return len(b) - len(a) }))
	}
	_, _ = tw.Write([]byte("card 4111222233334444 id 123456 and 269999 of 12345678\n"))
	if got := tw.String(); strings.ContainsAny(got, "0123456789") {
		t.Errorf("tail %q; want every value taken out", got)
	}
}
