package fencetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
)

// The steps of several calls at once: PrepareWait's coalescing (opWait), an outcome kept in
// the spool while the ledger fails (opSpool), claims of different intents racing for one
// domain (opRace) and a holder on a lease of real milliseconds (opLease). Each runs on engines
// of its own over the world's store, one per process (the process's owner and settings, the
// host's spool), made for the step: their counts are the step's, not a process's.

// faultStore is a world's real store with a switch: while it fails, every transaction fails
// as an unreachable database does (before anything is written), or, with landFirst, the first
// write transaction lands and its answer is lost, and every one after fails. It also notes
// which waiters (contexts carrying a waiterKey) have had an answer from it.
type faultStore struct {
	fence.Store
	mode  atomic.Int32 // 0: working; failBefore; failAfterFirst
	mu    sync.Mutex
	asked map[int]bool
}

const (
	failBefore     = 1
	failAfterFirst = 2
)

var errInjected = errors.New("fencetest: the ledger is unreachable (injected)")

type waiterKey struct{}

func (s *faultStore) note(ctx context.Context) {
	if k, ok := ctx.Value(waiterKey{}).(int); ok {
		s.mu.Lock()
		if s.asked == nil {
			s.asked = map[int]bool{}
		}
		s.asked[k] = true
		s.mu.Unlock()
	}
}

func (s *faultStore) askedAll(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.asked) >= n
}

func (s *faultStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	switch s.mode.Load() {
	case failBefore:
		return errInjected
	case failAfterFirst:
		s.mode.Store(failBefore)
		// It lands whatever the caller's deadline (Settle's may be shorter than a busy
		// store's transaction): only its answer is lost.
		if err := s.Store.Update(context.WithoutCancel(ctx), fn); err != nil {
			return err
		}
		return errInjected
	}
	err := s.Store.Update(ctx, fn)
	s.note(ctx)
	return err
}

func (s *faultStore) View(ctx context.Context, fn func(fence.Tx) error) error {
	if s.mode.Load() != 0 {
		return errInjected
	}
	err := s.Store.View(ctx, fn)
	s.note(ctx)
	return err
}

// WriteFirst passes on what the real store does.
func (s *faultStore) WriteFirst() bool {
	wf, ok := s.Store.(fence.WriteFirst)
	return ok && wf.WriteFirst()
}

// notifyingFaultStore is a faultStore over a store that tells waiters (PostgreSQL).
type notifyingFaultStore struct{ *faultStore }

func (s notifyingFaultStore) Watch(ctx context.Context, intent string) (<-chan struct{}, func(), error) {
	return s.Store.(fence.Notifier).Watch(ctx, intent)
}

// stepEngines are the engines of one step over the world's store behind a faultStore, one
// per process; dead names a process the step has declared dead (-1: none).
type stepEngines struct {
	st   *faultStore
	engs [3]*fence.Engine
	dead atomic.Int32
}

func (d *diffRun) stepEngines(w *diffWorld, lease time.Duration, spool string) *stepEngines {
	s := &stepEngines{st: &faultStore{Store: w.st}}
	s.dead.Store(-1)
	var st fence.Store = s.st
	if _, ok := w.st.(fence.Notifier); ok {
		st = notifyingFaultStore{s.st}
	}
	for i := range s.engs {
		cfg := w.cfgs[i]
		cfg.SpoolDir = spool
		if lease > 0 { // opLease: a lease of real milliseconds, and outcomes that last
			cfg.LeaseTTL, cfg.ResultTTL = lease, time.Hour
		}
		cfg.Liveness = func(owner string) fence.Liveness {
			if p := s.dead.Load(); p >= 0 && owner == owners[p] {
				return fence.Dead
			}
			return d.liveness(owner)
		}
		s.engs[i] = fence.New(st, cfg)
	}
	return s
}

// liveness is how the processes judge an owner (the model's m.seen).
func (d *diffRun) liveness(owner string) fence.Liveness {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, o := range owners {
		if o == owner {
			return d.m.seen[i]
		}
	}
	return fence.CannotTell
}

// done flushes the step's engines and returns what they counted.
func (s *stepEngines) done() (fence.Counters, error) {
	var c fence.Counters
	for _, e := range s.engs {
		if err := e.Flush(bg); err != nil {
			return c, err
		}
		st, err := e.Stats(bg)
		if err != nil {
			return c, err
		}
		c = c.Add(st.SinceBoot)
	}
	return c, nil
}

// subCounters returns c - d, field by field.
func subCounters(c, d fence.Counters) fence.Counters {
	cv, dv := reflect.ValueOf(&c).Elem(), reflect.ValueOf(d)
	for i := 0; i < cv.NumField(); i++ {
		cv.Field(i).SetUint(cv.Field(i).Uint() - dv.Field(i).Uint())
	}
	return c
}

// aside runs model updates and takes what they count away from the processes (the step's
// engines counted it): it goes to m.extra and is returned.
func (d *diffRun) aside(fn func()) fence.Counters {
	before := d.m.counts
	fn()
	var delta fence.Counters
	for i := range d.m.counts {
		delta = delta.Add(subCounters(d.m.counts[i], before[i]))
	}
	d.m.counts = before
	d.m.extra = d.m.extra.Add(delta)
	return delta
}

// eligible lists the processes whose leases and outcomes last (an hour) and that are not
// seen dead: their claims are held and their certs replayed for the whole step. alive also
// asks that they are seen alive.
func (d *diffRun) eligible(alive bool) []int {
	var ps []int
	for i, seen := range d.m.seen {
		if !d.m.short[i] && !d.m.brief[i] && seen != fence.Dead && (!alive || seen == fence.Alive) {
			ps = append(ps, i)
		}
	}
	return ps
}

// waitReq is a request for a step whose duplicates must not depend on a replay window.
// Most of the time its intent is one the ledger does not hold, so that the step's holder is
// admitted and the step's calls run.
func (d *diffRun) waitReq() fence.Request {
	req := d.request()
	if req.ReplayWindow == time.Nanosecond {
		req.ReplayWindow = 0
	}
	if r := d.m.recs[req.Intent]; r.live() && d.chance(0.75) {
		var free []string
		for _, id := range diffIntents {
			if !d.m.recs[id].live() {
				free = append(free, id)
			}
		}
		if len(free) > 0 {
			req.Intent = free[d.pick(len(free))]
		}
	}
	return req
}

// opWait: a holder's claim is held (an hour's lease, the holder alive) while identical
// attempts of every process wait for it (PrepareWait), and the holder then settles it. Every
// waiter must receive the one outcome: the committed cert (counted coalesced), or the
// failure; after a release exactly one waiter is admitted afresh (it commits, and the others
// then replay its cert; its record is then cleared, since which process won is not the same
// on every store). Quitters, waiting beside them for a few milliseconds only, are each told
// the intent is in flight, and counted so, before the holder settles.
func (d *diffRun) opWait() diffOp {
	hs, ws := d.eligible(true), d.eligible(false)
	if len(hs) == 0 {
		return d.opPrepare()
	}
	h, req := hs[d.pick(len(hs))], d.waitReq()
	waiters := make([]int, 2+d.pick(3))
	for i := range waiters {
		waiters[i] = ws[d.pick(len(ws))]
	}
	kind := [...]string{"commit", "commit", "commit", "release", "release", "abort", "lost"}[d.pick(7)]
	res, res2 := jsonResult(d.result()), jsonResult(d.result())
	settle := d.chance(0.3)
	reason := diffReasons[d.pick(len(diffReasons))]
	// Quitters wait too, and stop waiting while the claim is still held: their wait (a few
	// milliseconds) runs out. (A waiter whose caller cancels is left out: whether the cancel
	// lands in PrepareWait's wait, answered "in flight" and counted, or in one of its
	// transactions, answered with the context's error and not counted, is a race that a
	// store watching ctx may lose either way, so the stores' counters could not agree.)
	var quitters []quitter
	if d.chance(0.5) {
		quitters = make([]quitter, 1+d.pick(2))
		for i := range quitters {
			quitters[i] = quitter{p: ws[d.pick(len(ws))], wait: time.Duration(2+d.pick(30)) * time.Millisecond}
		}
	}
	return diffOp{
		what: fmt.Sprintf("p%d wait: prepare %s; waiters in %v; quitters %v; holder %s (settle %v) result %q reason %q", h, reqText(req), waiters, quitters, kind, settle, trunc(res), reason),
		run: func(w *diffWorld) answer {
			s := d.stepEngines(w, 0, w.spool)
			adm, err := s.engs[h].Prepare(bg, req)
			a := admAnswer(w, adm, err)
			if adm.Ticket != nil {
				quit := runQuitters(w, s, req, len(waiters), quitters)
				a.Rest, a.Sub = d.runWait(w, s, h, *adm.Ticket, req, waiters, len(quitters), kind, settle, res, res2, reason)
				a.Rest = append(a.Rest, quit...)
			}
			a.Status = d.statusText(w, h, req.Intent)
			c, err := s.done()
			if err != nil {
				return errAnswer(err)
			}
			a.Extra = fmt.Sprintf("%+v", c)
			return a
		},
		expect: func(a answer) {
			counted := d.aside(func() { d.expectWait(req, h, waiters, quitters, kind, reason, res, res2, a) })
			if want := fmt.Sprintf("%+v", counted); a.Extra != want {
				d.failf("model: the step's engines counted %s, want %s", a.Extra, want)
			}
		},
	}
}

// settleWith reports kind for ticket t through e, directly or through Settle.
func settleWith(e *fence.Engine, t fence.Ticket, kind string, settle bool, res []byte, reason string) answer {
	var c *fence.Cert
	var err error
	switch {
	case settle:
		c, err = e.Settle(bg, fence.Outcome{Kind: fence.OutcomeKind(kind), Ticket: t, Result: res, Reason: reason})
	case kind == "commit":
		c, err = e.Commit(bg, t, res)
	case kind == "abort":
		err = e.Abort(bg, t, reason)
	case kind == "release":
		err = e.Release(bg, t, reason)
	default:
		err = e.Lost(bg, t, reason)
	}
	a := errAnswer(err)
	a.Cert = certCopy(c)
	return a
}

// waitLimit bounds every wait of the concurrent steps: a waiter never answered fails the step.
const waitLimit = 30 * time.Second

// quitter is a waiter of opWait, in process p, whose wait runs out before the holder settles.
type quitter struct {
	p    int
	wait time.Duration
}

func (q quitter) String() string { return fmt.Sprintf("p%d for %v", q.p, q.wait) }

// runQuitters runs the quitters of an opWait step while the holder's claim is held, and
// returns their answers in their order, each marked "quit: ". Their waiter keys follow the n
// waiters'.
func runQuitters(w *diffWorld, s *stepEngines, req fence.Request, n int, quitters []quitter) []string {
	out := make([]string, len(quitters))
	var wg sync.WaitGroup
	for i, q := range quitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.WithValue(bg, waiterKey{}, n+i)
			adm, err := s.engs[q.p].PrepareWait(ctx, req, q.wait)
			out[i] = "quit: " + answerText(admAnswer(w, adm, err))
		}()
	}
	wg.Wait()
	return out
}

func (d *diffRun) runWait(w *diffWorld, s *stepEngines, h int, t fence.Ticket, req fence.Request, waiters []int, quitters int, kind string, settle bool, res, res2 []byte, reason string) ([]string, []answer) {
	type got struct {
		k   int
		adm fence.Admission
		err error
	}
	ch := make(chan got, len(waiters))
	for k, p := range waiters {
		go func() {
			ctx := context.WithValue(bg, waiterKey{}, k)
			adm, err := s.engs[p].PrepareWait(ctx, req, waitLimit)
			ch <- got{k, adm, err}
		}()
	}
	var subs []answer
	// The holder settles once every waiter has been told the intent is in flight.
	for deadline := time.Now().Add(waitLimit); !s.st.askedAll(len(waiters) + quitters); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			subs = append(subs, answer{Code: "WAITERS NEVER ASKED THE LEDGER"})
			break
		}
	}
	subs = append(subs, settleWith(s.engs[h], t, kind, settle, res, reason))
	var rest []string
	var fresh *fence.Engine
	timeout := time.After(waitLimit + 5*time.Second)
	for n := 0; n < len(waiters); n++ {
		select {
		case g := <-ch:
			wa := admAnswer(w, g.adm, g.err)
			if g.adm.Ticket != nil {
				// Admitted after the release: it commits, and the other waiters replay it.
				fresh = s.engs[waiters[g.k]]
				subs = append(subs, wa, settleWith(fresh, *g.adm.Ticket, "commit", false, res2, ""))
				continue
			}
			rest = append(rest, answerText(wa))
		case <-timeout:
			rest = append(rest, "A WAITER WAS NEVER ANSWERED")
			n = len(waiters)
		}
	}
	sort.Strings(rest)
	if fresh != nil {
		// Every waiter has its answer: the record of the one that won goes.
		_, err := fresh.Clear(bg, req.Intent, "diff", "which waiter won differs between stores")
		subs = append(subs, errAnswer(err))
	}
	return rest, subs
}

// jsonResult is r, or a JSON value when r is not one (a step whose holder must commit).
func jsonResult(r []byte) []byte {
	if !canon.Valid(r) {
		return []byte(`{"not":"json before"}`)
	}
	return r
}

func (d *diffRun) expectWait(req fence.Request, h int, waiters []int, quitters []quitter, kind, reason string, res, res2 []byte, a answer) {
	m := d.m
	holder := a
	holder.Rest, holder.Sub, holder.Status, holder.Extra = nil, nil, "", ""
	id := len(m.tickets)
	d.expectPrepare(req, h, holder)
	if len(m.tickets) == id { // not admitted: nobody waited
		if len(a.Rest) > 0 || len(a.Sub) > 0 {
			d.failf("model: no claim, no waiters; got waiters %q and %v", a.Rest, a.Sub)
		}
		return
	}
	// The quitters stopped waiting while the claim was held: each is told it is in flight,
	// and counted so; nothing else changes.
	if len(a.Rest) < len(quitters) {
		d.failf("model: %d answers for %d waiters and %d quitters", len(a.Rest), len(waiters), len(quitters))
		return
	}
	quit := a.Rest[len(a.Rest)-len(quitters):]
	inFlight := "quit: " + answerText(errAnswer(fence.InFlightError{Intent: req.Intent, Holder: m.recs[req.Intent].agent}))
	for i, q := range quitters {
		m.counts[q.p].InFlight++
		if quit[i] != inFlight {
			d.failf("model: quitter %v answered %s; want %s", q, quit[i], inFlight)
			return
		}
		d.tally["wait-quitters:in-flight"]++
	}
	a.Rest = a.Rest[:len(a.Rest)-len(quitters)]
	if len(a.Sub) == 0 {
		d.failf("model: the holder's %s is missing", kind)
		return
	}
	if kind == "commit" {
		d.expectCommit(h, id, false, req.Intent, res, a.Sub[0])
	} else {
		d.expectEnd(kind, h, id, false, req.Intent, reason, a.Sub[0])
	}
	n := len(waiters)
	var want []string
	rec := m.recs[req.Intent]
	if rec == nil { // released: the first waiter the gates admit runs it, the others wait for it
		for _, r := range req.ReadSet {
			if cur := m.cur(r.Domain); cur != r.Seq {
				for _, p := range waiters {
					m.counts[p].Stale++
					want = append(want, answerText(errAnswer(fence.StaleReadSetError{Intent: req.Intent, Domain: r.Domain, Expected: r.Seq, Actual: cur})))
				}
				break
			}
		}
		if want == nil {
			if len(a.Sub) != 4 {
				d.failf("model: after the release one waiter is admitted, commits and is cleared; got %v", a.Sub[1:])
				return
			}
			d.expectPrepare(req, waiters[0], a.Sub[1])
			d.expectCommit(waiters[0], id+1, false, req.Intent, res2, a.Sub[2])
			n--
			rec = m.recs[req.Intent]
		}
	}
	if rec != nil {
		var w answer
		switch rec.state {
		case fence.StateDone:
			w = answer{Kind: "replayed", Cert: certCopy(rec.cert), NoKept: rec.keepHash}
		case fence.StateInFlight:
			d.failf("model: the claim is still in flight after its holder's %s", kind)
			return
		default:
			w = errAnswer(fence.PriorFailureError{Intent: req.Intent, State: rec.state, Reason: rec.reason, Healable: false})
		}
		for i := 0; i < n; i++ {
			if w.Kind == "replayed" {
				m.counts[waiters[i]].Coalesced++
			} else {
				m.counts[waiters[i]].PriorFailure++
			}
			want = append(want, answerText(w))
		}
	}
	d.tally["wait-waiters:after-"+kind] += len(waiters)
	sort.Strings(want)
	if !slices.Equal(a.Rest, want) {
		d.failf("model: the waiters answered\n%s\nwant\n%s", strings.Join(a.Rest, "\n"), strings.Join(want, "\n"))
	}
	if len(a.Sub) == 4 {
		d.want(a.Sub[3], "", "", "")
		d.event(req.Intent, fence.EventClear, fence.StateDone)
		delete(m.recs, req.Intent)
	}
}

// mSpool is the outcome the model holds waiting in the host's spool.
type mSpool struct {
	intent, kind, reason string
	id                   int
	res                  []byte
}

// opSpool: the holder settles while the ledger fails (every transaction, or all but the
// first, whose answer is lost), so the outcome waits in the host's spool; the holder may be
// declared dead meanwhile; the ledger comes back; a duplicate in some process asks (and,
// refused as unknown, has DrainedFor record what waits and asks again), and a Recover in some
// process drains what is left. The duplicate must never be admitted while the outcome waits:
// it is replayed, refused as the outcome says, or admitted after a release.
func (d *diffRun) opSpool() diffOp {
	h, p, q := d.pick(3), d.pick(3), d.pick(3)
	req := d.waitReq()
	kind := [...]string{"commit", "commit", "commit", "release", "abort", "lost"}[d.pick(6)]
	mode := int32(failBefore)
	if d.chance(0.3) {
		mode = failAfterFirst
	}
	// held: the spool cannot take the outcome either (its directory's path runs through a
	// file), so the holder's engine holds it in memory: only that engine's DrainedFor and
	// Recover record it, and it ends with the step's engines if neither does.
	kill, dup, held := d.chance(0.4), d.chance(0.75), d.chance(0.25)
	if kill && d.chance(0.5) {
		req.RerunSafe = true // a dead holder's re-run-safe claim is taken over, unless its outcome waits
	}
	if held && d.chance(0.5) {
		p = h // the engine that holds the outcome asks
	}
	// lapse: the holder's claim has a lease of 1 ns, so that a duplicate finds it unknown.
	lapse := d.chance(0.4)
	res, reason := jsonResult(d.result()), diffReasons[d.pick(len(diffReasons))]
	return diffOp{
		what: fmt.Sprintf("p%d spool: prepare %s; holder %s (ledger failing, mode %d, spool failing %v, lease lapsed %v) result %q reason %q; holder dead %v; duplicate %v in p%d; recover in p%d", h, reqText(req), kind, mode, held, lapse, trunc(res), reason, kill, dup, p, q),
		run: func(w *diffWorld) answer {
			spool, blocker := w.spool, ""
			if held {
				blocker = filepath.Join(w.spool, fmt.Sprintf("blocked-%d", d.m.serial))
				if err := os.WriteFile(blocker, nil, 0o600); err != nil {
					return errAnswer(err)
				}
				spool = filepath.Join(blocker, "spool")
			}
			s := d.stepEngines(w, 0, spool)
			if lapse {
				cfg := s.engs[h].Config()
				cfg.LeaseTTL = time.Nanosecond
				s.engs[h] = fence.New(s.engs[h].Store(), cfg)
			}
			adm, err := s.engs[h].Prepare(bg, req)
			a := admAnswer(w, adm, err)
			if adm.Ticket != nil {
				a.Sub = d.runSpool(w, s, h, p, q, *adm.Ticket, req, kind, mode, kill, dup, blocker, res, reason)
			}
			a.Status = d.statusText(w, h, req.Intent)
			c, err := s.done()
			if err != nil {
				return errAnswer(err)
			}
			a.Extra = fmt.Sprintf("%+v", c)
			return a
		},
		expect: func(a answer) {
			if held { // until the Settle, the step's engines' spool runs through a file
				d.m.unread = fmt.Sprintf("open <spool>/blocked-%d/spool: not a directory", d.m.serial)
			}
			d.m.serial++ // names the blocking file
			counted := d.aside(func() { d.expectSpool(req, h, p, q, kind, mode, kill, dup, held, lapse, res, reason, a) })
			if want := fmt.Sprintf("%+v", counted); a.Extra != want {
				d.failf("model: the step's engines counted %s, want %s", a.Extra, want)
			}
		},
	}
}

// rawCert is the cert recorded for intent, expired or not.
func rawCert(w *diffWorld, intent string) *fence.Cert {
	var c *fence.Cert
	_ = w.st.View(bg, func(tx fence.Tx) error {
		c = nil
		r, err := tx.Get(intent)
		if r != nil {
			c = certCopy(r.Cert)
		}
		return err
	})
	return c
}

func spoolCount(w *diffWorld) string {
	files, err := fence.SpoolFiles(w.spool)
	return fmt.Sprintf("spool files=%d err=%v", len(files), err)
}

func (d *diffRun) runSpool(w *diffWorld, s *stepEngines, h, p, q int, t fence.Ticket, req fence.Request, kind string, mode int32, kill, dup bool, blocker string, res []byte, reason string) []answer {
	if mode == failAfterFirst {
		// The landed transaction carries no counts of its own (the engine counts them again).
		if err := s.engs[h].Flush(bg); err != nil {
			return []answer{errAnswer(err)}
		}
	}
	s.st.mode.Store(mode)
	ctx, cancel := context.WithTimeout(bg, 40*time.Millisecond) // ends before Settle's first retry
	_, err := s.engs[h].Settle(ctx, fence.Outcome{Kind: fence.OutcomeKind(kind), Ticket: t, Result: res, Reason: reason})
	cancel()
	sa := errAnswer(err)
	var se fence.SpooledError
	switch {
	case errors.As(err, &se):
		sa = answer{Code: "spooled"}
	case err != nil && strings.Contains(err.Error(), "it is held in this process's memory"):
		sa = answer{Code: "held"}
	}
	sa.Extra = spoolCount(w)
	if kill {
		s.dead.Store(int32(h))
	}
	s.st.mode.Store(0)
	if blocker != "" { // the spool works again
		if err := os.Remove(blocker); err != nil {
			return []answer{errAnswer(err)}
		}
	}
	sa.Cert = rawCert(w, req.Intent) // what the landed transaction recorded, if it did
	subs := []answer{sa}
	if dup {
		adm, err := s.engs[p].Prepare(bg, req)
		subs = append(subs, admAnswer(w, adm, err))
		drained, derr := s.engs[p].DrainedFor(bg, err)
		subs = append(subs, answer{Extra: fmt.Sprintf("drained=%v err=%v", drained, derr), Cert: rawCert(w, req.Intent)})
		if drained {
			adm, err := s.engs[p].Prepare(bg, req)
			subs = append(subs, admAnswer(w, adm, err))
		}
	}
	n, err := s.engs[q].Recover(bg)
	ra := errAnswer(err)
	ra.N, ra.Extra, ra.Cert = n, spoolCount(w), rawCert(w, req.Intent)
	return append(subs, ra)
}

// spoolOutcome is the model of the spooled outcome reported by engine ei (the holder's
// landed transaction, or a drain); quiet when nobody sees its answer, and c is the cert the
// ledger holds afterwards.
func (d *diffRun) spoolOutcome(o *mSpool, ei int, quiet bool, c *fence.Cert) {
	a := answer{Cert: c}
	d.quiet, d.retry = quiet, quiet // a drain is a retry, nobody sees its answer
	defer func() { d.quiet, d.retry = false, false }()
	if o.kind == "commit" {
		d.expectCommit(ei, o.id, false, o.intent, o.res, a)
	} else {
		d.expectEnd(o.kind, ei, o.id, false, o.intent, o.reason, a)
	}
}

func (d *diffRun) expectSpool(req fence.Request, h, p, q int, kind string, mode int32, kill, dup, held, lapse bool, res []byte, reason string, a answer) {
	m := d.m
	holder := a
	holder.Sub, holder.Status, holder.Extra = nil, "", ""
	id := len(m.tickets)
	d.expectPrepare(req, h, holder)
	m.unread = "" // the blocking file is removed after the Settle
	if len(m.tickets) == id {
		if len(a.Sub) > 0 {
			d.failf("model: no claim, so nothing to settle; got %v", a.Sub)
		}
		return
	}
	if lapse {
		m.recs[req.Intent].lapsed = true
	}
	want := 2
	if dup {
		want += 2
	}
	if len(a.Sub) < want {
		d.failf("model: want %d later answers, got %v", want, a.Sub)
		return
	}
	last := a.Sub[len(a.Sub)-1]
	o := &mSpool{intent: req.Intent, kind: kind, reason: reason, id: id, res: res}
	if s := a.Sub[0]; !held && (s.Code != "spooled" || s.Extra != "spool files=1 err=<nil>") {
		d.failf("model: the outcome waits in the spool (one file); got %s", show(s))
		return
	} else if held && (s.Code != "held" || s.Extra != "spool files=0 err=<nil>") {
		d.failf("model: the outcome is held in the holder's memory (no spool file); got %s", show(s))
		return
	}
	if mode == failAfterFirst {
		d.spoolOutcome(o, h, false, a.Sub[0].Cert) // landed; its answer was lost
	}
	pending := true
	if rec := m.recs[req.Intent]; !held && rec != nil && rec.ticket == id && rec.state == fence.StateInFlight {
		rec.spooled = true
	}
	drain := func(ei int, c *fence.Cert) {
		if pending && (!held || ei == h) { // only the holder's engine has what it holds
			pending = false
			if rec := m.recs[req.Intent]; rec != nil {
				rec.spooled = false
			}
			d.spoolOutcome(o, ei, true, c)
		}
	}
	if kill {
		d.mu.Lock()
		m.seen[h] = fence.Dead
		d.mu.Unlock()
	}
	dupPrepare := func(a answer) {
		n := len(m.tickets)
		d.expectPrepare(req, p, a)
		if r := m.recs[req.Intent]; lapse && p == h && len(m.tickets) > n && r != nil {
			r.lapsed = true // the holder's engine gives leases of 1 ns
		}
	}
	if dup {
		dupPrepare(a.Sub[1])
		drained := a.Sub[1].Code == fence.CodePriorFailure && pending && (!held || p == h)
		if want := fmt.Sprintf("drained=%v err=<nil>", drained); a.Sub[2].Extra != want {
			d.failf("model: DrainedFor answered %s, want %s", a.Sub[2].Extra, want)
			return
		}
		d.tally[fmt.Sprintf("spool-duplicate:%s%s-drained-%v", a.Sub[1].Code, a.Sub[1].Kind, drained)]++
		if drained {
			if len(a.Sub) != 5 {
				d.failf("model: want the attempt after the drain; got %v", a.Sub)
				return
			}
			drain(p, a.Sub[2].Cert)
			dupPrepare(a.Sub[3])
		}
	}
	drain(q, last.Cert)
	if pending { // held by the holder's engine, which ends with the step: the claim is judged as any
		d.tally["spool-held-outcome-ended-with-its-engine"]++
	}
	rec := last
	rec.Cert, rec.N, rec.Extra = nil, 0, ""
	d.want(rec, "", "", "")
	if last.Extra != "spool files=0 err=<nil>" {
		d.failf("model: Recover leaves the spool empty; got %s", last.Extra)
	}
	d.expectRecover(q, last.N)
}

// timingPrefix starts the intents and domains of the steps whose answers depend on timing
// (opRace, opLease): each checks its own rules, leaves no record behind, keeps its domains
// apart and its counts and audit events out of the comparisons.
const timingPrefix = "timing:"

// opRace: claims of different intents race at once for two domains (each with a domain, a
// read set, or both), then each admitted one commits, releases or aborts. Which wins is the
// machine's, so the step checks what holds whatever the order: each domain's numbers are
// handed out once each, in a row above the number read before, and never fall; an admitted
// claim whose read set names its own domain got the number right after the one it read; a
// refusal names a read-set domain that really moved; a commit is refused as stale exactly
// when a domain of its read set moved since (its own reservation aside); every cert verifies.
func (d *diffRun) opRace() diffOp {
	d.m.serial++
	serial := d.m.serial
	doms := []string{timingPrefix + "d0", timingPrefix + "d1"}
	type racer struct {
		proc   int
		domain string
		reads  []string
		kind   string
	}
	racers := make([]racer, 3+d.pick(4))
	for i := range racers {
		r := racer{proc: d.pick(3), kind: [...]string{"commit", "commit", "commit", "release", "abort"}[d.pick(5)]}
		if d.chance(0.85) {
			r.domain = doms[d.pick(2)]
		}
		for _, dom := range doms {
			if (dom == r.domain && d.chance(0.6)) || (dom != r.domain && d.chance(0.35)) {
				r.reads = append(r.reads, dom)
			}
		}
		racers[i] = r
	}
	return diffOp{
		what: fmt.Sprintf("race %d: %+v, all at once", serial, racers),
		run: func(w *diffWorld) answer {
			s := d.stepEngines(w, 0, w.spool)
			var bad []string
			badf := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
			cur := map[string]uint64{}
			for _, dom := range doms {
				c, err := s.engs[0].Current(bg, dom)
				if err != nil {
					return errAnswer(err)
				}
				if c < w.raceSeen[dom] {
					badf("domain %q fell from %d to %d between steps", dom, w.raceSeen[dom], c)
				}
				cur[dom] = c
			}
			reqs := make([]fence.Request, len(racers))
			for i, r := range racers {
				reqs[i] = fence.Request{Intent: fmt.Sprintf("%srace:%d:%d", timingPrefix, serial, i), Tool: "t", Args: []byte(`{"a":1}`), Domain: r.domain, Agent: "a"}
				for _, dom := range r.reads {
					reqs[i].ReadSet = append(reqs[i].ReadSet, fence.ReadSetEntry{Domain: dom, Seq: cur[dom]})
				}
			}
			type got struct {
				adm fence.Admission
				err error
			}
			out := make([]got, len(racers))
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, r := range racers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					out[i].adm, out[i].err = s.engs[r.proc].Prepare(bg, reqs[i])
				}()
			}
			close(start)
			wg.Wait()
			issued := map[string]map[uint64]int{}
			for i, g := range out {
				req := reqs[i]
				var stale fence.StaleReadSetError
				var race fence.DomainRaceError
				switch {
				case g.err == nil && g.adm.Ticket != nil:
					t := g.adm.Ticket
					d.tally["race:admitted"]++
					if req.Domain == "" {
						if t.Seq != 0 {
							badf("racer %d: no domain, seq %d", i, t.Seq)
						}
						break
					}
					if issued[req.Domain] == nil {
						issued[req.Domain] = map[uint64]int{}
					}
					if j, ok := issued[req.Domain][t.Seq]; ok {
						badf("domain %q: seq %d handed out to racers %d and %d", req.Domain, t.Seq, j, i)
					}
					issued[req.Domain][t.Seq] = i
					if t.Seq <= cur[req.Domain] {
						badf("racer %d: seq %d of %q not above %d, read before the race", i, t.Seq, req.Domain, cur[req.Domain])
					}
					if hasDomain(req.ReadSet, req.Domain) && t.Seq != cur[req.Domain]+1 {
						badf("racer %d read %q at %d and was admitted with seq %d: it moved in between", i, req.Domain, cur[req.Domain], t.Seq)
					}
				case errors.As(g.err, &stale):
					d.tally["race:stale"]++
					if !hasDomain(req.ReadSet, stale.Domain) || stale.Expected != cur[stale.Domain] || stale.Actual <= stale.Expected || stale.Executed {
						badf("racer %d: refused stale %+v, having read %v", i, stale, req.ReadSet)
					}
				case errors.As(g.err, &race):
					d.tally["race:domain_race"]++
					if race.Domain != req.Domain || !hasDomain(req.ReadSet, race.Domain) || race.Expected != cur[race.Domain] || race.Actual <= race.Expected {
						badf("racer %d: refused as a domain race %+v, having read %v", i, race, req.ReadSet)
					}
				default:
					badf("racer %d: answered %v", i, g.err)
				}
			}
			for dom, seqs := range issued {
				for n := cur[dom] + 1; n <= cur[dom]+uint64(len(seqs)); n++ {
					if _, ok := seqs[n]; !ok {
						badf("domain %q: seqs %v handed out, %d skipped", dom, seqs, n)
					}
				}
			}
			final := map[string]uint64{}
			for _, dom := range doms {
				c, err := s.engs[0].Current(bg, dom)
				if err != nil {
					return errAnswer(err)
				}
				if want := cur[dom] + uint64(len(issued[dom])); c != want {
					badf("domain %q: %d after %d admissions from %d", dom, c, len(issued[dom]), cur[dom])
				}
				final[dom] = c
			}
			for i, g := range out {
				t := g.adm.Ticket
				if t == nil {
					continue
				}
				r := racers[i]
				stale := false
				for _, e := range reqs[i].ReadSet {
					want := e.Seq
					if e.Domain == reqs[i].Domain {
						want = t.Seq
					}
					stale = stale || final[e.Domain] != want
				}
				a := settleWith(s.engs[r.proc], *t, r.kind, false, []byte(`{"racer":1}`), "race")
				switch {
				case r.kind != "commit":
					if a.Code != "" {
						badf("racer %d: %s refused: %s", i, r.kind, show(a))
					}
				case stale:
					d.tally["race:commit-stale"]++
					if a.Code != fence.CodeStale || !strings.Contains(a.Err, "executed=true") {
						badf("racer %d: a domain of its read set %v moved (now %v), and its commit answered %s", i, reqs[i].ReadSet, final, show(a))
					}
				default:
					d.tally["race:commit"]++
					switch {
					case a.Code != "" || a.Cert == nil:
						badf("racer %d: commit refused though its read set %v held (now %v): %s", i, reqs[i].ReadSet, final, show(a))
					case a.Cert.Verify() != nil || a.Cert.Intent != reqs[i].Intent || a.Cert.Domain != reqs[i].Domain || a.Cert.Seq != t.Seq:
						badf("racer %d: cert %+v (verify: %v) for ticket %+v", i, *a.Cert, a.Cert.Verify(), *t)
					}
				}
			}
			for _, req := range reqs {
				if _, err := s.engs[0].Clear(bg, req.Intent, "diff", "a race step's intent"); err != nil && !isNotFound(err) {
					badf("clear %q: %v", req.Intent, err)
				}
			}
			maps.Copy(w.raceSeen, final)
			c, err := s.done()
			if err != nil {
				return errAnswer(err)
			}
			w.timing = w.timing.Add(c)
			for _, b := range bad {
				d.failf("race on %s: %s", w.name, b)
			}
			return answer{}
		},
		expect: func(answer) {},
	}
}

// opLease: a holder on a lease of real milliseconds (40 or 80) heartbeats (every quarter,
// third or half of its lease, or never) while duplicates of every process keep asking, and
// then settles. What a duplicate is told depends on timing, so the step takes any of the
// answers the rules allow: in flight, or unknown as a live holder's lapsed lease (healable),
// and once the commit is recorded its cert. Never an admission (the holder is alive), never
// another cert; every heartbeat and the settle succeed (healing the claim if it went unknown),
// each heartbeat's lease ends later than the last and is the one recorded.
func (d *diffRun) opLease() diffOp {
	var hs []int
	for i, s := range d.m.seen {
		if s == fence.Alive {
			hs = append(hs, i)
		}
	}
	if len(hs) == 0 {
		return d.opStatus()
	}
	d.m.serial++
	h := hs[d.pick(len(hs))]
	lease := []time.Duration{40 * time.Millisecond, 80 * time.Millisecond}[d.pick(2)]
	beat := []time.Duration{0, lease / 4, lease / 3, lease / 2, lease / 2}[d.pick(5)]
	hold := 2 * lease
	kind := [...]string{"commit", "commit", "commit", "commit", "release", "abort", "lost"}[d.pick(7)]
	req := fence.Request{Intent: fmt.Sprintf("%slease:%d", timingPrefix, d.m.serial), Tool: "t", Args: []byte(`{"a":1}`), Agent: "a", RerunSafe: d.chance(0.5)}
	if d.chance(0.5) {
		req.Domain = timingPrefix + "lease"
	}
	return diffOp{
		what: fmt.Sprintf("p%d lease: holds %q on a lease of %v for %v, heartbeat every %v, then %s; rerun safe %v", h, req.Intent, lease, hold, beat, kind, req.RerunSafe),
		run: func(w *diffWorld) answer {
			for _, b := range d.runLease(w, h, req, lease, beat, hold, kind) {
				d.failf("lease on %s: %s", w.name, b)
			}
			return answer{}
		},
		expect: func(answer) {},
	}
}

func (d *diffRun) runLease(w *diffWorld, h int, req fence.Request, lease, beat, hold time.Duration, kind string) []string {
	s := d.stepEngines(w, lease, w.spool)
	var mu sync.Mutex
	var bad []string
	badf := func(format string, args ...any) {
		mu.Lock()
		bad = append(bad, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	seen := map[string]int{}
	adm, err := s.engs[h].Prepare(bg, req)
	if err != nil || adm.Ticket == nil {
		return []string{fmt.Sprintf("the holder's prepare: %v %+v", err, adm)}
	}
	t := *adm.Ticket
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if beat > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(beat)
			defer tick.Stop()
			prev := t.LeaseUntil
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				nt, err := s.engs[h].Heartbeat(bg, t)
				if err != nil {
					badf("heartbeat: %v", err)
					return
				}
				if !nt.LeaseUntil.After(prev) {
					badf("heartbeat: the lease ends at %v, not after %v", nt.LeaseUntil, prev)
				}
				prev = nt.LeaseUntil
				if rec, err := s.engs[h].Status(bg, req.Intent); err != nil || rec.LeaseUntil.Sub(nt.LeaseUntil).Abs() > time.Millisecond {
					badf("after a heartbeat to %v the record's lease ends at %v (%v)", nt.LeaseUntil, rec.LeaseUntil, err)
				}
			}
		}()
	}
	for p := range s.engs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(7 * time.Millisecond):
				}
				adm, err := s.engs[p].Prepare(bg, req)
				var pf fence.PriorFailureError
				switch {
				case errors.Is(err, fence.ErrInFlight):
					mu.Lock()
					seen["in_flight"]++
					mu.Unlock()
				case errors.As(err, &pf) && pf.State == fence.StateUnknown && pf.Healable && strings.Contains(pf.Reason, "holder alive but silent"):
					mu.Lock()
					seen["unknown"]++
					mu.Unlock()
				default:
					badf("p%d's duplicate while the holder is alive: %s %v", p, admText(adm), err)
				}
			}
		}()
	}
	// A waiter (PrepareWait) of another process asks again and again until the holder
	// settles: it is answered when the lease lapses (unknown, healable), or by the outcome.
	type waited struct {
		adm fence.Admission
		err error
	}
	var waits []waited
	waiting := make(chan struct{})
	wp := (h + 2) % 3
	go func() {
		defer close(waiting)
		for {
			adm, err := s.engs[wp].PrepareWait(bg, req, waitLimit)
			mu.Lock()
			waits = append(waits, waited{adm, err})
			mu.Unlock()
			if err == nil {
				return // the outcome: a replay, or an admission after the release
			}
			select {
			case <-stop:
				if !errors.Is(err, fence.ErrPriorFailure) || !strings.Contains(err.Error(), "holder alive but silent") {
					return // the settled outcome's refusal
				}
			default:
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(hold)
	close(stop)
	wg.Wait()
	a := settleWith(s.engs[h], t, kind, false, []byte(`{"leased":true}`), "done")
	if a.Code != "" {
		badf("the holder's %s: %s", kind, show(a))
	}
	if kind == "commit" && (a.Cert == nil || a.Cert.Verify() != nil || a.Cert.Intent != req.Intent || string(a.Cert.Result) != `{"leased":true}`) {
		badf("the holder's cert: %+v", a.Cert)
	}
	select {
	case <-waiting:
	case <-time.After(waitLimit + 5*time.Second):
		badf("the waiter was never answered")
		return bad
	}
	for i, wt := range waits {
		var pf fence.PriorFailureError
		last := i == len(waits)-1
		switch {
		case errors.As(wt.err, &pf) && pf.State == fence.StateUnknown && pf.Healable && strings.Contains(pf.Reason, "holder alive but silent"):
			d.tally["lease-waiter:unknown"]++
		case last && kind == "commit" && wt.err == nil && wt.adm.Cert != nil && a.Cert != nil && reflect.DeepEqual(certCopy(wt.adm.Cert), a.Cert):
			d.tally["lease-waiter:coalesced"]++
		case last && kind == "release" && wt.err == nil && wt.adm.Ticket != nil:
			d.tally["lease-waiter:admitted-after-release"]++
			if err := s.engs[wp].Release(bg, *wt.adm.Ticket, "the waiter's turn ends"); err != nil {
				badf("the waiter's release: %v", err)
			}
		case last && (kind == "abort" || kind == "lost") && errors.As(wt.err, &pf) && !pf.Healable:
			d.tally["lease-waiter:refused-as-settled"]++
		default:
			badf("p%d's waiter (answer %d of %d) while the holder is alive: %s %v", wp, i+1, len(waits), admText(wt.adm), wt.err)
		}
	}
	after, err := s.engs[(h+1)%3].Prepare(bg, req)
	var pf fence.PriorFailureError
	switch {
	case kind == "commit":
		if err != nil || after.Cert == nil || a.Cert == nil || !reflect.DeepEqual(certCopy(after.Cert), a.Cert) {
			badf("a duplicate after the commit: %s %v, want the cert %s", admText(after), err, certHash(a.Cert))
		}
	case kind == "release":
		if err != nil || after.Ticket == nil {
			badf("a duplicate after the release: %s %v, want a ticket", admText(after), err)
		}
	case !errors.As(err, &pf) || pf.Healable || pf.State != map[string]fence.State{"abort": fence.StateFailed, "lost": fence.StateUnknown}[kind]:
		badf("a duplicate after the %s: %s %v", kind, admText(after), err)
	}
	if _, err := s.engs[h].Clear(bg, req.Intent, "diff", "a lease step's intent"); err != nil && !isNotFound(err) {
		badf("clear: %v", err)
	}
	c, err := s.done()
	if err != nil {
		badf("flush: %v", err)
	}
	w.timing = w.timing.Add(c)
	for k, n := range seen {
		d.tally["lease-duplicate:"+k] += n
	}
	return bad
}

// admText is an admission as text, without what differs between stores.
func admText(a fence.Admission) string {
	switch {
	case a.Ticket != nil:
		return "ticket " + ticketText(*a.Ticket)
	case a.Cert != nil:
		return "replay of cert " + certHash(a.Cert)
	}
	return "no admission"
}

func certHash(c *fence.Cert) string {
	if c == nil {
		return "none"
	}
	return c.Hash
}
