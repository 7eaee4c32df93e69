package fence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A PrepareWait whose ctx ends while it waits answers with the InFlightError it waited on
// (its doc says so since 2026-12-06; it said only maxWait's end gave one), and promptly.
func TestPrepareWaitCutByItsContextAnswersInFlight(t *testing.T) {
	ctx := context.Background()
	e := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer e.Close()
	req := fence.Request{Intent: "x", Tool: "t"}
	if adm, err := e.Prepare(ctx, req); err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := e.PrepareWait(wctx, req, time.Minute)
	if !errors.Is(err, fence.ErrInFlight) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wait cut by its context: %v; want the InFlightError it waited on", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the wait ended %v after its context was given 50 ms", d)
	}
}

// A wait whose ctx ends as its poll timer fires answers with the InFlightError too: select
// picks among ready cases at random, and a wait woken by its timer after ctx ended asked the
// ledger again and answered ctx's error; so did one whose ctx ended as it asked again. A ctx
// of 14 ms ends as the third poll does (2, 4 and 8 ms), leaving the first ask time to be made.
func TestPrepareWaitCutAsItsPollWakesAnswersInFlight(t *testing.T) {
	ctx := context.Background()
	e := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer e.Close()
	req := fence.Request{Intent: "x", Tool: "t"}
	if adm, err := e.Prepare(ctx, req); err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	for i := range 100 {
		wctx, cancel := context.WithTimeout(ctx, 14*time.Millisecond)
		_, err := e.PrepareWait(wctx, req, time.Minute)
		cancel()
		if !errors.Is(err, fence.ErrInFlight) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait %d cut by its context: %v; want the InFlightError it waited on", i, err)
		}
	}
}
