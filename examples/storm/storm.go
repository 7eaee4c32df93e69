package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// The storm: one $49.00 charge, attempted 1,000 times the way a fleet attempts it: 40 waves of
// 25 racers. Wave 1 is the original decision taken by 25 agents at once; the later waves are
// retries, re-dispatches and redeliveries that arrive while the first is running and after.
const (
	waves        = 40
	racersAWave  = 25
	amountCents  = 4900
	intent       = "charge:order-4242"
	chargeTool   = "charge_card"
	stormAttempt = waves * racersAWave
)

// result is what the storm measured.
type result struct {
	Executions  int64 // times the effect really ran (the card was charged)
	Receipts    int64 // attempts answered with the recorded cert
	StoodDown   int64 // attempts told not to run (in flight) and that did not run
	Other       int64 // anything else: a bug
	Elapsed     time.Duration
	Stats       fence.Counters
	CertHashes  int // distinct cert hashes handed out
	PreventedUS int64
}

// storm runs the 1,000 attempts against eng. chargeCard is the effect.
func storm(ctx context.Context, eng *fence.Engine, chargeCard func() []byte) (result, error) {
	var (
		r      result
		mu     sync.Mutex
		hashes = map[string]bool{}
	)
	args, _ := json.Marshal(map[string]any{"amount": amountCents, "currency": "usd", "order": "4242"})
	attempt := func(agent int) {
		adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: chargeTool, Args: args, Agent: fmt.Sprintf("agent-%d", agent)})
		switch {
		case err == nil && adm.Fresh():
			atomic.AddInt64(&r.Executions, 1)
			cert, err := eng.Commit(ctx, *adm.Ticket, chargeCard())
			if err != nil {
				atomic.AddInt64(&r.Other, 1)
				return
			}
			mu.Lock()
			hashes[cert.Hash] = true
			mu.Unlock()
		case err == nil:
			atomic.AddInt64(&r.Receipts, 1)
			mu.Lock()
			hashes[adm.Cert.Hash] = true
			mu.Unlock()
		case errors.Is(err, fence.ErrInFlight):
			atomic.AddInt64(&r.StoodDown, 1)
		default:
			atomic.AddInt64(&r.Other, 1)
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < waves; w++ {
		gate := make(chan struct{})
		for i := 0; i < racersAWave; i++ {
			wg.Add(1)
			go func(agent int) {
				defer wg.Done()
				<-gate
				attempt(agent)
			}(w*racersAWave + i)
		}
		close(gate) // the wave's racers start together; waves overlap
	}
	wg.Wait()
	r.Elapsed = time.Since(start)
	s, err := eng.Stats(ctx)
	if err != nil {
		return r, err
	}
	r.Stats = s.SinceBoot
	r.CertHashes = len(hashes)
	return r, nil
}
