package wrap

import (
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
)

// StateSizes is the number of entries in each per-call structure of the proxy: all zero once
// every call has ended, however it ended.
func (p *Proxy) StateSizes() map[string]int {
	out := map[string]int{}
	p.flights.mu.Lock()
	out["flights"] = len(p.flights.m)
	p.flights.mu.Unlock()
	p.cmu.Lock()
	out["cancels"] = len(p.cancels)
	p.cmu.Unlock()
	p.rmu.Lock()
	out["running"] = len(p.running)
	p.rmu.Unlock()
	p.pmu.Lock()
	out["pending"] = len(p.pending)
	p.pmu.Unlock()
	p.elicit.mu.Lock()
	out["asks"] = len(p.elicit.asks)
	p.elicit.mu.Unlock()
	return out
}

// LocalTasks is the number of tasks the proxy answers itself and the bytes of their results.
func (p *Proxy) LocalTasks() (n, bytes int) {
	p.local.mu.Lock()
	defer p.local.mu.Unlock()
	for _, t := range p.local.m {
		bytes += len(t.result)
	}
	return len(p.local.m), bytes
}

// SetMaxLocalTaskBytes lowers the bound on the results of local tasks for a test; it returns
// a func that puts it back.
func SetMaxLocalTaskBytes(n int) func() {
	old := maxLocalTaskBytes
	maxLocalTaskBytes = n
	return func() { maxLocalTaskBytes = old }
}

// SetTaskGrace sets how long past a task's ttl wrap waits for its final result, for a test;
// it returns a func that puts it back.
func SetTaskGrace(d time.Duration) func() {
	old := taskGrace
	taskGrace = d
	return func() { taskGrace = old }
}

// SetRequestBudget replaces the process's RequestBudget by a pool of total bytes and the wait
// for room in it by wait, for the proxies made after it in a test; it returns the pool and a
// func that puts both back.
func SetRequestBudget(total int64, wait time.Duration) (*budget.Pool, func()) {
	oldPool, oldWait := requests, requestWait
	requests, requestWait = budget.NewPool(total), wait
	return requests, func() { requests, requestWait = oldPool, oldWait }
}

// Waiting is the number of calls waiting in the ledger for an attempt of their intent (the
// members of the flights, the attempt's own caller before it is admitted included).
func (p *Proxy) Waiting() int {
	p.flights.mu.Lock()
	defer p.flights.mu.Unlock()
	n := 0
	for _, f := range p.flights.m {
		n += f.members
	}
	return n
}

// SetRerunning sets the func called as a call that waited on a first round (SEP-2322) goes
// through the fence again; it returns a func that puts the old one back.
func SetRerunning(f func()) func() {
	old := rerunning
	rerunning = f
	return func() { rerunning = old }
}

// SetMaxQuestionReruns sets maxQuestionReruns; it returns a func that puts the old one back.
func SetMaxQuestionReruns(n int) func() {
	old := maxQuestionReruns
	maxQuestionReruns = n
	return func() { maxQuestionReruns = old }
}

// SetFollowerClaimed sets the func called as a follower's pass holds the claim it took, before
// it releases it; it returns a func that puts the old one back.
func SetFollowerClaimed(f func(intent string)) func() {
	old := followerClaimed
	followerClaimed = f
	return func() { followerClaimed = old }
}
