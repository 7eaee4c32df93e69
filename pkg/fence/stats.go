package fence

import (
	"fmt"
	"sync/atomic"
)

// Counters count attempts by what the fence did with them. Every Prepare or PrepareWait call
// with a valid request lands in exactly one of the attempt buckets (Admitted, Reclaimed,
// Replayed, Coalesced and the five refusals), and so does every PrepareWaitUncounted call whose
// Decision is counted (a caller that asks again for one call counts only its last answer);
// LeaseLost counts refused Commit, Abort, Release and Heartbeat calls, which are not attempts.
type Counters struct {
	Admitted     uint64 `json:"admitted"`
	Reclaimed    uint64 `json:"reclaimed"`
	Replayed     uint64 `json:"replayed"`
	Coalesced    uint64 `json:"coalesced"`
	Stale        uint64 `json:"refused_stale_read_set"`
	Race         uint64 `json:"refused_domain_race"`
	InFlight     uint64 `json:"refused_in_flight"`
	PriorFailure uint64 `json:"refused_prior_failure"`
	Conflict     uint64 `json:"refused_conflict"`
	LeaseLost    uint64 `json:"lease_lost"`
}

// Total is the number of attempts.
func (c Counters) Total() uint64 {
	return c.Admitted + c.Reclaimed + c.Replayed + c.Coalesced + c.Refused()
}

// Refused is the number of attempts refused by a gate.
func (c Counters) Refused() uint64 {
	return c.Stale + c.Race + c.InFlight + c.PriorFailure + c.Conflict
}

// Prevented is the number of attempts that did not execute the effect because the fence
// answered them: every attempt but the admitted and reclaimed ones. It is counted as the
// fence answers, so an admitted attempt whose holder then releases it (the effect definitely
// did not happen) still counts as admitted, not as prevented.
func (c Counters) Prevented() uint64 { return c.Total() - c.Admitted - c.Reclaimed }

// Add returns c + d.
func (c Counters) Add(d Counters) Counters {
	return Counters{
		c.Admitted + d.Admitted, c.Reclaimed + d.Reclaimed, c.Replayed + d.Replayed, c.Coalesced + d.Coalesced,
		c.Stale + d.Stale, c.Race + d.Race, c.InFlight + d.InFlight, c.PriorFailure + d.PriorFailure,
		c.Conflict + d.Conflict, c.LeaseLost + d.LeaseLost,
	}
}

// IsZero reports whether nothing was counted.
func (c Counters) IsZero() bool {
	return c.Admitted|c.Reclaimed|c.Replayed|c.Coalesced|c.Stale|c.Race|c.InFlight|c.PriorFailure|c.Conflict|c.LeaseLost == 0
}

// Line is the one-line form, e.g.
// "admitted=1 replayed=995 refused(stale=0 race=4 in-flight=0 failed=0 conflict=0) total=1000 prevented=999";
// reclaimed, coalesced and lease_lost appear only when non-zero.
func (c Counters) Line() string {
	s := fmt.Sprintf("admitted=%d ", c.Admitted)
	if c.Reclaimed > 0 {
		s += fmt.Sprintf("reclaimed=%d ", c.Reclaimed)
	}
	s += fmt.Sprintf("replayed=%d ", c.Replayed)
	if c.Coalesced > 0 {
		s += fmt.Sprintf("coalesced=%d ", c.Coalesced)
	}
	s += fmt.Sprintf("refused(stale=%d race=%d in-flight=%d failed=%d conflict=%d) total=%d prevented=%d",
		c.Stale, c.Race, c.InFlight, c.PriorFailure, c.Conflict, c.Total(), c.Prevented())
	if c.LeaseLost > 0 {
		s += fmt.Sprintf(" lease-lost=%d", c.LeaseLost)
	}
	return s
}

// Stats is the engine's view: this process since it started, and the ledger's totals over
// every process that shares it (counts of other processes arrive as they flush). A process's
// counts ride in its next write transaction (or a later one, when the store asks: see
// CountersDeferred), and Close flushes them. When the store answers that transaction with an
// error although it landed (its answer was lost: the connection cut at COMMIT), a store that
// says so (CountersKept: the PostgreSQL store) keeps the counts and adds them only once it
// learns the transaction did not land; after any other error the engine keeps them and writes
// them again, so with a store that lost an answer without saying so the ledger's totals may
// exceed the processes' counts by what that transaction carried (fencetest.Differential's
// spool step, whose failing store says nothing, flushes first for that reason). One engine's
// Ledger totals never go down from one Stats to the next (see Engine.Stats).
type Stats struct {
	SinceBoot Counters `json:"since_boot"`
	Ledger    Counters `json:"ledger"`
}

// Line is "effectfence since boot: " followed by SinceBoot.Line().
func (s Stats) Line() string { return "effectfence since boot: " + s.SinceBoot.Line() }

// bucket names one field of Counters.
type bucket int

const (
	bAdmitted bucket = iota
	bReclaimed
	bReplayed
	bCoalesced
	bStale
	bRace
	bInFlight
	bPriorFailure
	bConflict
	bLeaseLost
	nBuckets
)

// field returns the address of c's field for b.
func (c *Counters) field(b bucket) *uint64 {
	switch b {
	case bAdmitted:
		return &c.Admitted
	case bReclaimed:
		return &c.Reclaimed
	case bReplayed:
		return &c.Replayed
	case bCoalesced:
		return &c.Coalesced
	case bStale:
		return &c.Stale
	case bRace:
		return &c.Race
	case bInFlight:
		return &c.InFlight
	case bPriorFailure:
		return &c.PriorFailure
	case bConflict:
		return &c.Conflict
	}
	return &c.LeaseLost
}

// counter keeps since-boot totals and how much of them was taken for the ledger; the rest
// is pending. Every attempt counts, so it takes no lock: one atomic increment per attempt
// (a locked instruction is a visible share of a replay). take and give move the pending part
// field by field; each count lands exactly once, in the delta taken or in what stays pending.
type counter struct {
	boot  [nBuckets]atomic.Uint64
	taken [nBuckets]atomic.Uint64 // never above boot
}

func (k *counter) add(b bucket) { k.boot[b].Add(1) }

func (k *counter) snapshot() Counters { return loadAll(&k.boot) }

// unflushed returns the pending part without taking it.
func (k *counter) unflushed() Counters {
	var c Counters
	for b := range nBuckets {
		t := k.taken[b].Load() // before boot: what boot says then is at least this
		*c.field(b) = k.boot[b].Load() - t
	}
	return c
}

func loadAll(a *[nBuckets]atomic.Uint64) Counters {
	var c Counters
	for b := range nBuckets {
		*c.field(b) = a[b].Load()
	}
	return c
}

// take removes and returns the unflushed delta; give puts it back after a failed write.
func (k *counter) take() Counters {
	var c Counters
	for b := range nBuckets {
		for {
			t := k.taken[b].Load()
			n := k.boot[b].Load()
			if n == t {
				break
			}
			if k.taken[b].CompareAndSwap(t, n) {
				*c.field(b) = n - t
				break
			}
		}
	}
	return c
}

func (k *counter) give(d Counters) {
	for b := range nBuckets {
		if v := *d.field(b); v != 0 {
			k.taken[b].Add(-v)
		}
	}
}
