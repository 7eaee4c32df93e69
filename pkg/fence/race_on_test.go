//go:build race

package fence_test

// raceEnabled: the race detector's instrumentation allocates, so allocation counts are
// checked only without it.
const raceEnabled = true
