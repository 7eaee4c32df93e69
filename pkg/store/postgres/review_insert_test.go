package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestFirstClaimRacesAcrossProcesses: two stores on one ledger (two processes), four callers
// each, race for the first claim of an intent, then for its claim again while another caller
// clears it, sweeps it once its result expired, or supersedes it (a replay window). Each race
// admits at most one caller (exactly one for a new intent), every other caller is answered
// (in flight, or the recorded result), and no caller ever sees another error: a plain INSERT
// of a claim never meets a row its transaction did not see.
func TestFirstClaimRacesAcrossProcesses(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	var engines []*fence.Engine
	for i := range 2 {
		s := openSized(t, schema, 6)
		engines = append(engines, fence.New(s, fence.Config{ResultTTL: ttl, Owner: fmt.Sprintf("host-%d/1/1", i)}))
	}
	const callers = 8
	// race runs callers attempts of r at once (and during, once, also), and returns the
	// admitted tickets.
	race := func(r fence.Request, also func()) []fence.Ticket {
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			won   []fence.Ticket
			start = make(chan struct{})
			errs  atomic.Int64
		)
		for i := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				adm, err := engines[i%2].Prepare(ctx, r)
				var inflight fence.InFlightError
				switch {
				case err == nil && adm.Fresh():
					mu.Lock()
					won = append(won, *adm.Ticket)
					mu.Unlock()
				case err == nil && adm.Cert != nil, errors.As(err, &inflight):
				default:
					errs.Add(1)
					t.Errorf("%s: caller %d: %+v %v", r.Intent, i, adm, err)
				}
			}()
		}
		if also != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				also()
			}()
		}
		close(start)
		wg.Wait()
		return won
	}
	commit := func(won []fence.Ticket, what string) {
		t.Helper()
		if len(won) > 1 {
			t.Fatalf("%s: %d callers admitted: %+v", what, len(won), won)
		}
		for _, tk := range won {
			if _, err := engines[0].Commit(ctx, tk, json.RawMessage(`{"ok":true}`)); err != nil {
				t.Fatalf("%s: commit: %v", what, err)
			}
		}
	}
	for round := range 24 {
		r := fence.Request{Intent: fmt.Sprintf("first:%d", round), Tool: "t", Args: json.RawMessage(`{"n":1}`)}
		won := race(r, nil)
		if len(won) != 1 {
			t.Fatalf("round %d: %d callers admitted to a new intent", round, len(won))
		}
		commit(won, fmt.Sprintf("round %d", round))
		var also func()
		switch round % 3 {
		case 0:
			also = func() {
				if _, err := engines[1].Clear(ctx, r.Intent, "op", "checked"); err != nil && !errors.Is(err, fence.ErrNotFound) {
					t.Errorf("round %d: clear: %v", round, err)
				}
			}
		case 1:
			time.Sleep(ttl + 50*time.Millisecond)
			also = func() {
				if _, err := engines[1].Sweep(ctx); err != nil {
					t.Errorf("round %d: sweep: %v", round, err)
				}
			}
		case 2:
			r.ReplayWindow = time.Millisecond
			time.Sleep(5 * time.Millisecond)
		}
		commit(race(r, also), fmt.Sprintf("round %d again", round))
	}
}
