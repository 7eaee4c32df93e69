package probe

import (
	"context"
	"runtime"
	"strings"
	"testing"
)

// TestWitnessOutputIsBounded: a witness that prints far more than a number (`cat charges.log`
// where `wc -l < charges.log` was meant) is read for its first whole number within its first
// 64 KiB and the rest is drained unkept. Before 2026-12-07 all of it was kept and split into
// fields: a witness printing 1.5 GB took the probe to 13 GB of memory. Measured in bytes
// allocated, not in time, and not in parallel: the heap's counters are the process's.
func TestWitnessOutputIsBounded(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("sh")
	}
	for _, c := range []struct {
		command string
		want    int64
		err     string
	}{
		// 7, then 64 MiB of text: 7 is the reading.
		{"echo 7; head -c 67108864 /dev/zero | tr '\\0' 'a'", 7, ""},
		// 64 MiB of text and no number: an error that says where it looked.
		{"head -c 67108864 /dev/zero | tr '\\0' 'a'; echo; echo 9", 0, "first 65536 bytes"},
		// a number cut by the bound is not read as a smaller one.
		{"head -c 65535 /dev/zero | tr '\\0' ' '; echo 123456", 0, "first 65536 bytes"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		n, err := CommandWitness{Command: c.command}.Measure(context.Background())
		runtime.ReadMemStats(&after)
		if c.err == "" && (err != nil || n != c.want) || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: read %d, %v; want %d %q", c.command, n, err, c.want, c.err)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
			t.Errorf("%s: reading the witness allocated %d MB", c.command, got>>20)
		}
	}
}
