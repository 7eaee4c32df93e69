//go:build linux

package history_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/history"
)

// TestRunSaysWhyAWrapCannotStart: a wrap that cannot start (here its binary is missing; in CI
// a wrap's HTTP front did not come up) ends the run with an error that says so. The run waited
// for ever instead, for the restarting goroutine a wrap that never started does not have (a CI
// run hung 11 minutes in TestHistory/postgres/http).
func TestRunSaysWhyAWrapCannotStart(t *testing.T) {
	for _, front := range []string{"stdio", "http"} {
		t.Run(front, func(t *testing.T) {
			t.Parallel()
			type outcome struct {
				rep *history.Report
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				rep, err := history.Run(context.Background(), history.Config{
					Seed: 1, Duration: 5 * time.Second, Ledger: "sqlite",
					Bin: filepath.Join(t.TempDir(), "no-effectfence"), Child: []string{child}, Dir: t.TempDir(), Log: testLog{t}, Front: front,
				})
				done <- outcome{rep, err}
			}()
			select {
			case o := <-done:
				if o.err == nil || !strings.Contains(o.err.Error(), "starting wrap 0") || !strings.Contains(o.err.Error(), "no-effectfence") {
					t.Fatalf("a run whose wraps cannot start: %v, %v", o.rep, o.err)
				}
				t.Log(o.err)
			case <-time.After(2 * time.Minute):
				t.Fatal("the run hung on a wrap that could not start")
			}
		})
	}
}
