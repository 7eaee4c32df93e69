package probe

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestWitnessTimeoutBoundsAPipeline: a witness past its timeout is an error that says so, and
// returns soon after, even when the shell started a pipeline whose commands keep the output
// open (the doc's `kubectl get pods … | wc -l`); it used to wait for them to end.
func TestWitnessTimeoutBoundsAPipeline(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("sh pipeline")
	}
	t.Parallel()
	start := time.Now()
	_, err := CommandWitness{Command: "sleep 8 | wc -l", Timeout: 300 * time.Millisecond}.Measure(context.Background())
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "did not finish within 300ms") {
		t.Fatalf("err = %v", err)
	}
	if took > 5*time.Second {
		t.Fatalf("the witness returned after %s with a 300ms timeout", took)
	}
}
