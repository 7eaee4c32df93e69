package hide

import "testing"

// TestEdges: a value at the edges of a piece of a stream is taken out also in part: its end
// where the piece was cut before it, its beginning where the writer stopped, the whole piece
// when it lies inside a value; elsewhere only whole values are.
func TestEdges(t *testing.T) {
	texts := []string{"4111222233334444", "true"}
	for _, c := range []struct {
		s    string
		cut  bool
		want string
	}{
		{"33334444 declined\n", true, "[redacted] declined\n"},
		{"2222333 declined\n", true, "[redacted] declined\n"}, // the cut and the value's end both inside
		{"charging 41112222", false, "charging [redacted]"},   // the writer stopped half way
		{"22223333", true, "[redacted]"},
		{"card 4111222233334444 ok\n", false, "card [redacted] ok\n"},
		{"33334444 declined\n", false, "33334444 declined\n"}, // not cut: a start is a start
		{"nothing here\n", true, "nothing here\n"},
		{"", true, ""},
	} {
		if got := Edges(c.s, texts, c.cut); got != c.want {
			t.Errorf("Edges(%q, cut=%v) = %q; want %q", c.s, c.cut, got, c.want)
		}
	}
}
