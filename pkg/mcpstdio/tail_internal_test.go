package mcpstdio

import (
	"fmt"
	"io"
	"strings"
	"testing"
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
