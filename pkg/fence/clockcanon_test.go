package fence

import "testing"

// TestAppendCanonicalOf: writing a clock with the agent it most likely holds alone gives what
// appendCanonical gives, whether or not the clock is that agent's alone.
func TestAppendCanonicalOf(t *testing.T) {
	cases := []struct {
		clock VectorClock
		agent string
	}{
		{nil, ""},
		{nil, "billing"},
		{VectorClock{}, "billing"},
		{VectorClock{"billing": 1}, "billing"},
		{VectorClock{"billing": 0}, "billing"},
		{VectorClock{"billing": 1 << 60}, "billing"},
		{VectorClock{"billing": 1}, "other"},
		{VectorClock{"billing": 1}, ""},
		{VectorClock{"": 4}, ""},
		{VectorClock{"b\u00e9\"\n\U0001F600": 7}, "b\u00e9\"\n\U0001F600"},
		{VectorClock{"billing": 2, "audit": 1}, "billing"},
		{VectorClock{"billing": 2, "audit": 0}, "billing"},
	}
	for _, c := range cases {
		want := string(c.clock.appendCanonical([]byte("x")))
		if got := string(c.clock.appendCanonicalOf([]byte("x"), c.agent)); got != want {
			t.Errorf("%v with agent %q: %s; want %s", c.clock, c.agent, got, want)
		}
	}
}
