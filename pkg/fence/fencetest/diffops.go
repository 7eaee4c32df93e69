package fencetest

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
)

// Reasons, who and results the operator and holder steps give: ordinary, hostile and empty.
var (
	diffReasons = []string{"checked the PSP", "checked the PSP", "checked", "", "  ", "\u2028why\"'", "tab\there", "a\x00b", "\xff"}
	diffWho     = []string{"ops", "", "\u202eevil", "x\x00y"}
)

// next picks the step to run.
func (d *diffRun) next() diffOp {
	if d.chance(0.04) { // the steps of several calls at once
		switch n := d.pick(20); {
		case n < 7:
			return d.opWait()
		case n < 13:
			return d.opSpool()
		case n < 17:
			return d.opRace()
		default:
			return d.opLease()
		}
	}
	haveTickets := len(d.m.tickets) > 0
	switch n := d.pick(100); {
	case n < 33 || !haveTickets && n < 66:
		return d.opPrepare()
	case n < 36:
		return d.opBurst()
	case n < 51:
		return d.opCommit()
	case n < 54:
		return d.opEnd("abort")
	case n < 58:
		return d.opEnd("release")
	case n < 61:
		return d.opEnd("lost")
	case n < 64:
		return d.opHeartbeat()
	case n < 70:
		return d.opStatus()
	case n < 73:
		return d.opCurrent()
	case n < 79:
		return d.opClear()
	case n < 85:
		return d.opResolve()
	case n < 88:
		return d.opEvict()
	case n < 89:
		if d.chance(0.5) {
			return d.opRestart()
		}
		return d.opSweep()
	case n < 91:
		return d.opRecover()
	case n < 94:
		return d.opKill()
	case n < 97:
		return d.opEvents()
	default:
		return d.opStats()
	}
}

func (d *diffRun) statusText(w *diffWorld, ei int, intent string) string {
	rec, err := w.engs[ei].Status(bg, intent)
	if err != nil {
		return "error: " + show(errAnswer(err))
	}
	return recText(rec)
}

// want compares the stores' answer with the model's on the fields the model predicts.
func (d *diffRun) want(got answer, code, errText, kind string) {
	d.t.Helper()
	if d.quiet {
		return
	}
	if got.Code != code || got.Err != errText || got.Kind != kind {
		d.failf("model: want code=%q err=%q kind=%q; got code=%q err=%q kind=%q", code, errText, kind, got.Code, got.Err, got.Kind)
	}
}

func (d *diffRun) wantErr(got answer, err error) {
	d.t.Helper()
	w := errAnswer(err)
	d.want(got, w.Code, w.Err, "")
}

func (d *diffRun) event(intent, kind string, before fence.State) {
	d.m.events = append(d.m.events, mEvent{intent: intent, kind: kind, before: before})
	d.tally["event "+kind]++
}

type mEvent struct {
	intent, kind string
	before       fence.State
	// ended is set on the event of an abort, release or lost that a claim reported: its
	// ticket id and its reason (the stores keep the claim's token with such an event, and a
	// retry of the report finds it there: fence's reported).
	ended  bool
	ticket int
	reason string
}

func (e mEvent) String() string { return fmt.Sprintf("%q %s %s", e.intent, e.kind, e.before) }

// invalid reports whether the engine refuses req as malformed, asking an engine over an
// empty store (validation is the engine's, the same over every store).
func (d *diffRun) invalid(req fence.Request) bool {
	_, err := fence.New(fence.NewMemoryStore(), fence.Config{}).Prepare(bg, req)
	return fence.CodeOf(err) == fence.CodeInvalid
}

type verdict int

const (
	vHeld verdict = iota
	vFence
	vTake
)

// judge is the engine's judgement of an in-flight claim by engine ei (docs/RELIABILITY.md),
// with the audit event's kind and reason; the instant in a reason is any (normText).
func (d *diffRun) judge(ei int, r *mRec) (verdict, string, string) {
	seen, o := fence.Alive, owners[r.owner]
	if r.owner != ei {
		seen = d.m.seen[r.owner]
	}
	const at = "2000-01-01T00:00:00.000Z"
	spooled := ""
	switch {
	case d.m.unread != "":
		spooled = "this host's spool cannot be read to see whether an outcome of the intent waits there (" + d.m.unread + ")"
	case r.spooled:
		spooled = "an outcome of the intent waits in this host's spool"
	}
	switch {
	case seen == fence.Dead && r.rerunSafe && spooled != "":
		return vFence, fence.EventOrphan, fmt.Sprintf("holder is gone (process %s) and %s: not taken over though re-run safe; the spool's drain records it", o, spooled)
	case seen == fence.Dead && r.rerunSafe:
		return vTake, fence.EventReclaim, ""
	case seen == fence.Dead:
		return vFence, fence.EventOrphan, fmt.Sprintf("holder is gone (process %s); the effect may have happened", o)
	case !r.lapsed:
		return vHeld, "", ""
	case seen == fence.Alive:
		return vFence, fence.EventExpired, fmt.Sprintf("lease lapsed at %s, holder alive but silent (stalled or stopped: process %s); a live holder is never taken over; its own late result heals this", at, o)
	case r.rerunSafe && spooled != "":
		return vFence, fence.EventExpired, fmt.Sprintf("lease lapsed at %s, holder out of sight (process %s), and %s: not taken over though re-run safe; the spool's drain records it", at, o, spooled)
	case r.rerunSafe:
		return vTake, fence.EventReclaim, ""
	}
	return vFence, fence.EventExpired, fmt.Sprintf("lease lapsed at %s, holder out of sight (another host or boot, or a PID namespace this process cannot see into: process %s); the effect may have happened; its own late result heals this", at, o)
}

// silentHolder is the model of Engine.SilentHolder: a claim in flight past its lease, or
// unknown and still healable, whose holder p ei sees alive.
func (d *diffRun) silentHolder(ei int, r *mRec) (string, bool) {
	inFlight := r.state == fence.StateInFlight && r.lapsed
	healable := r.state == fence.StateUnknown && r.nonce
	if !inFlight && !healable {
		return "", false
	}
	if r.owner != ei && d.m.seen[r.owner] != fence.Alive {
		return "", false
	}
	return fmt.Sprintf("the lease of claim 0 lapsed at 2000-01-01T00:00:00Z, but its holder, process %s, still runs on this host (stopped, stalled, or a serve process whose agent runs the call): if it resumes, it may still run or finish the effect, and the next attempt would run it again; stop that process (the fence then sees it gone) or let its late result settle the intent", owners[r.owner]), true
}

// leaseRuns is the model of Engine's leaseRuns: a claim in flight, or unknown and healable,
// whose lease has not lapsed is not freed by an operator who did not force it.
func (d *diffRun) leaseRuns(r *mRec) (string, bool) {
	if (r.state != fence.StateInFlight && !(r.state == fence.StateUnknown && r.nonce)) || r.lapsed {
		return "", false
	}
	return fmt.Sprintf("the lease of claim 0 runs until 2000-01-01T00:00:00Z: whoever holds its ticket (the agent of a serve claim, a process its holder started) may still run or finish the effect, even with its holder process %s gone; wait until the lease lapses, or look again then", owners[r.owner]), true
}

// markUnknown is the model of a claim judged orphaned or lapsed.
func (d *diffRun) markUnknown(intent string, r *mRec, kind, why string) {
	d.event(intent, kind, fence.StateInFlight)
	r.state, r.reason = fence.StateUnknown, why
}

func (d *diffRun) opPrepare() diffOp {
	req, ei := d.request(), d.pick(3)
	return diffOp{
		what: fmt.Sprintf("p%d prepare %s", ei, reqText(req)),
		run: func(w *diffWorld) answer {
			adm, err := w.engs[ei].Prepare(bg, req)
			a := admAnswer(w, adm, err)
			a.Status = d.statusText(w, ei, req.Intent)
			return a
		},
		expect: func(a answer) { d.expectPrepare(req, ei, a) },
	}
}

// admAnswer is the answer to one Prepare; a ticket joins the world's tickets.
func admAnswer(w *diffWorld, adm fence.Admission, err error) answer {
	a := errAnswer(err)
	switch {
	case err != nil:
	case adm.Ticket != nil:
		a.Kind = "fresh"
		if adm.Ticket.Reclaimed {
			a.Kind = "reclaimed"
		}
		a.Ticket = ticketText(*adm.Ticket)
		if adm.Ticket.Token <= w.lastTok {
			a.Ticket += fmt.Sprintf(" TOKEN DID NOT GROW (%d after %d)", adm.Ticket.Token, w.lastTok)
		}
		w.lastTok = adm.Ticket.Token
		w.tickets = append(w.tickets, *adm.Ticket)
	case adm.Cert != nil:
		a.Kind, a.Cert, a.NoKept = "replayed", certCopy(adm.Cert), adm.ResultNotKept
		if err := adm.Cert.Verify(); err != nil {
			a.Kind += " CERT DOES NOT VERIFY: " + err.Error()
		}
	default:
		a.Kind = "EMPTY ADMISSION"
	}
	return a
}

// burstSize is how many identical attempts opBurst makes at once.
const burstSize = 4

// opBurst makes burstSize identical attempts at once, through one process (so that the
// record's owner is the same whichever attempt wins): at most one is admitted, and the others
// are answered as one attempt after it would be (in flight behind the winner, or as the first
// was: replayed, refused alike).
func (d *diffRun) opBurst() diffOp {
	req, ei := d.request(), d.pick(3)
	if d.m.short[ei] {
		// Its claim would lapse at once, and which loser finds it lapsed first is a race.
		return d.opPrepare()
	}
	return diffOp{
		what: fmt.Sprintf("p%d prepare %s, %d at once", ei, reqText(req), burstSize),
		run: func(w *diffWorld) answer {
			type attempt struct {
				adm fence.Admission
				err error
			}
			out := make([]attempt, burstSize)
			var wg sync.WaitGroup
			for i := range out {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out[i].adm, out[i].err = w.engs[ei].Prepare(bg, req)
				}()
			}
			wg.Wait()
			// The admitted attempt, if any, answers first; the others follow in text order.
			slices.SortStableFunc(out, func(x, y attempt) int {
				switch {
				case x.adm.Ticket != nil && y.adm.Ticket == nil:
					return -1
				case x.adm.Ticket == nil && y.adm.Ticket != nil:
					return 1
				}
				return 0
			})
			a := admAnswer(w, out[0].adm, out[0].err)
			for _, at := range out[1:] {
				a.Rest = append(a.Rest, answerText(admAnswer(w, at.adm, at.err)))
			}
			sort.Strings(a.Rest)
			a.Status = d.statusText(w, ei, req.Intent)
			return a
		},
		expect: func(a answer) { d.expectBurst(req, ei, a) },
	}
}

// answerText is a's fields that must agree, as text.
func answerText(a answer) string {
	hash := ""
	if a.Cert != nil {
		hash = a.Cert.Hash
	}
	return fmt.Sprintf("code=%q err=%q kind=%q cert=%s notkept=%v ticket=%q", a.Code, a.Err, a.Kind, hash, a.NoKept, a.Ticket)
}

func (d *diffRun) expectBurst(req fence.Request, ei int, a answer) {
	d.expectPrepare(req, ei, a) // the first answer is a single attempt's
	first := a
	first.Rest, first.Status = nil, ""
	want := answerText(first)
	c := &d.m.counts[ei]
	bucket := map[string]*uint64{fence.CodeConflict: &c.Conflict, fence.CodePriorFailure: &c.PriorFailure, fence.CodeStale: &c.Stale, fence.CodeInFlight: &c.InFlight}[a.Code]
	switch {
	case a.Code == "" && (a.Kind == "fresh" || a.Kind == "reclaimed"):
		want = answerText(errAnswer(fence.InFlightError{Intent: req.Intent, Holder: req.Agent}))
		bucket = &c.InFlight
	case a.Code == "" && a.Kind == "replayed":
		bucket = &c.Replayed
	}
	for _, r := range a.Rest {
		if r != want {
			d.failf("model: an attempt beside the first answered %s, want %s", r, want)
		}
		if bucket != nil {
			*bucket++
		}
	}
}

func reqText(r fence.Request) string {
	return fmt.Sprintf("{intent=%q tool=%q args=%q domain=%q readset=%v agent=%q clock=%v parent=%q rerun=%v redact=%q keep=%q exact=%v window=%v}",
		r.Intent, r.Tool, r.Args, r.Domain, r.ReadSet, r.Agent, map[string]uint64(r.Clock), r.Parent, r.RerunSafe, r.Redact, r.KeepResult, r.ExactArgs != nil, r.ReplayWindow)
}

func (d *diffRun) expectPrepare(req fence.Request, ei int, a answer) {
	m := d.m
	if d.invalid(req) {
		if a.Code != fence.CodeInvalid {
			d.failf("model: want invalid_request, got %s", show(a))
		}
		return
	}
	fp, err := d.probe.Fingerprint(req.Tool, req.Args)
	if err != nil {
		d.failf("fingerprint of a valid request: %v", err)
		return
	}
	rec := m.recs[req.Intent]
	if rec != nil && rec.expired {
		rec = nil // an expired outcome is forgotten
	}
	var reclaim, superseded *mRec
	if rec != nil {
		if rec.fp != fp {
			m.counts[ei].Conflict++
			d.wantErr(a, fence.IntentConflictError{Intent: req.Intent, Recorded: rec.fp, Presented: fp})
			return
		}
		switch rec.state {
		case fence.StateDone:
			if req.ReplayWindow == time.Nanosecond {
				superseded = rec // moved aside once this attempt is admitted
				break
			}
			m.counts[ei].Replayed++
			d.want(a, "", "", "replayed")
			if !reflect.DeepEqual(a.Cert, certCopy(rec.cert)) || a.NoKept != rec.keepHash {
				d.failf("replay: want the committed cert %+v (not kept %v)", *rec.cert, rec.keepHash)
			}
			return
		case fence.StateFailed, fence.StateUnknown:
			m.counts[ei].PriorFailure++
			healable := rec.state == fence.StateUnknown && rec.nonce && (rec.owner == ei || m.seen[rec.owner] != fence.Dead)
			d.wantErr(a, fence.PriorFailureError{Intent: req.Intent, State: rec.state, Reason: rec.reason, Healable: healable})
			return
		case fence.StateInFlight:
			switch v, kind, why := d.judge(ei, rec); v {
			case vHeld:
				m.counts[ei].InFlight++
				d.wantErr(a, fence.InFlightError{Intent: req.Intent, Holder: rec.agent})
				return
			case vFence:
				m.counts[ei].PriorFailure++
				d.markUnknown(req.Intent, rec, kind, why)
				d.wantErr(a, fence.PriorFailureError{Intent: req.Intent, State: fence.StateUnknown, Reason: why, Healable: kind == fence.EventExpired})
				return
			default:
				reclaim = rec
			}
		}
	}
	for _, r := range req.ReadSet {
		if cur := m.cur(r.Domain); cur != r.Seq {
			m.counts[ei].Stale++
			d.wantErr(a, fence.StaleReadSetError{Intent: req.Intent, Domain: r.Domain, Expected: r.Seq, Actual: cur})
			return
		}
	}
	var seq uint64
	if req.Domain != "" {
		seq = m.cur(req.Domain) + 1
		m.domains[req.Domain] = seq
		if m.issued[req.Domain] == nil {
			m.issued[req.Domain] = map[uint64]bool{}
		}
		for s := range m.issued[req.Domain] {
			if s >= seq {
				d.failf("domain %q: seq %d handed out after %d", req.Domain, seq, s)
			}
		}
		m.issued[req.Domain][seq] = true
	}
	if superseded != nil {
		base := fence.SupersededIntent(req.Intent, superseded.cert.Hash)
		name := ""
		for i := 1; i <= 16 && name == ""; i++ {
			// A name held by an expired outcome is free, as the gates forget it.
			if n := supersededName(base, i); m.recs[n] == nil || (m.recs[n].state == fence.StateDone && m.recs[n].expired) {
				name = n
			}
		}
		if name == "" {
			// The engine moves it to a name of 128 random bits, which no model can name.
			d.failf("model: sixteen names taken; the engine's random spare name is beyond the model (%q)", req.Intent)
			return
		}
		moved := *superseded
		m.recs[name] = &moved
		d.event(req.Intent, fence.EventSuperseded, fence.StateDone)
	}
	kind := "fresh"
	if reclaim != nil {
		kind = "reclaimed"
		m.counts[ei].Reclaimed++
		d.event(req.Intent, fence.EventReclaim, fence.StateInFlight)
	} else {
		m.counts[ei].Admitted++
	}
	d.want(a, "", "", kind)
	id := len(m.tickets)
	m.tickets = append(m.tickets, mTicket{intent: req.Intent})
	want := ticketText(fence.Ticket{Intent: req.Intent, Token: 1, Nonce: "x", Domain: req.Domain, Seq: seq, Reclaimed: reclaim != nil, KeepHash: req.KeepResult == fence.KeepHash})
	if a.Ticket != want {
		d.failf("model: want ticket %s, got %s", want, a.Ticket)
	}
	m.recs[req.Intent] = &mRec{
		state: fence.StateInFlight, fp: fp, ticket: id, nonce: true, owner: ei, agent: req.Agent,
		rerunSafe: req.RerunSafe || ei == 2, domain: req.Domain, seq: seq,
		readSet: slices.Clone(req.ReadSet), keepHash: req.KeepResult == fence.KeepHash, lapsed: m.short[ei],
	}
}

func supersededName(base string, i int) string {
	if i == 1 {
		return base
	}
	return fmt.Sprintf("%s~%d", base, i)
}

// ticket picks a ticket id the model handed out, or -1 for a forged one (its intent's).
func (d *diffRun) ticket() (id int, forged bool) {
	n := len(d.m.tickets)
	var live []int // tickets of the claims recorded now
	for _, r := range d.m.recs {
		if r.ticket >= 0 && r.nonce && r.state != fence.StateDone {
			live = append(live, r.ticket)
		}
	}
	sort.Ints(live) // map order is random; the sequence must not be
	if len(live) > 0 && d.chance(0.6) {
		return live[d.pick(len(live))], d.chance(0.03)
	}
	if d.chance(0.6) {
		id = n - 1 - d.pick(min(n, 3)) // a recent one, most of the time
	} else {
		id = d.pick(n)
	}
	return id, d.chance(0.05)
}

func (d *diffRun) worldTicket(w *diffWorld, id int, forged bool) fence.Ticket {
	t := w.tickets[id]
	if forged {
		t.Nonce = "forged"
	}
	return t
}

// holds is the model of the engine's holds check for ticket id (forged: never the claim).
func (d *diffRun) holds(intent string, id int, forged bool) (heals bool, lost error) {
	rec := d.m.recs[intent]
	if rec != nil && !forged && rec.state == fence.StateUnknown && rec.nonce && rec.ticket == id {
		return true, nil
	}
	switch {
	case rec == nil:
		return false, fence.LeaseLostError{Intent: intent, Why: "no claim is recorded: it was cleared, released or never made"}
	case forged || rec.ticket != id || !rec.nonce:
		return false, fence.LeaseLostError{Intent: intent, Why: fmt.Sprintf("the intent is held by claim 0 (%s)", rec.state)}
	case rec.state != fence.StateInFlight:
		return false, fence.LeaseLostError{Intent: intent, Why: "the claim already ended as " + string(rec.state)}
	}
	return false, nil
}

// lateResult is the model of a refused settle: counted, and audited.
func (d *diffRun) lateResult(ei int, intent string) {
	d.m.counts[ei].LeaseLost++
	st := fence.StateNone
	if rec := d.m.recs[intent]; rec != nil {
		st = rec.state
	}
	d.event(intent, fence.EventLateResult, st)
}

func (d *diffRun) opCommit() diffOp {
	id, forged := d.ticket()
	ei := d.pick(3)
	res := d.result()
	intent := d.m.tickets[id].intent
	settle := d.chance(0.2) // through Settle, which answers as Commit when the ledger does
	return diffOp{
		what: fmt.Sprintf("p%d commit ticket %d (forged %v, settle %v) of %q result %q", ei, id, forged, settle, intent, trunc(res)),
		run: func(w *diffWorld) answer {
			var c *fence.Cert
			var err error
			if settle {
				c, err = w.engs[ei].Settle(bg, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: d.worldTicket(w, id, forged), Result: res})
			} else {
				c, err = w.engs[ei].Commit(bg, d.worldTicket(w, id, forged), res)
			}
			a := errAnswer(err)
			a.Cert = certCopy(c)
			a.Status = d.statusText(w, ei, intent)
			return a
		},
		expect: func(a answer) { d.expectCommit(ei, id, forged, intent, res, a) },
	}
}

func trunc(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}

func (d *diffRun) expectCommit(ei, id int, forged bool, intent string, res []byte, a answer) {
	m := d.m
	if len(res) == 0 {
		res = []byte("null")
	}
	if !canon.Valid(res) {
		d.want(a, fence.CodeInvalid, errAnswer(fence.InvalidError{Field: "result", Why: "not a JSON value"}).Err, "")
		return
	}
	rec := m.recs[intent]
	if rec != nil && !forged && rec.state == fence.StateDone && rec.ticket == id && rec.nonce {
		d.want(a, "", "", "")
		if !d.quiet && !reflect.DeepEqual(a.Cert, certCopy(rec.cert)) {
			d.failf("a retried commit: want the recorded cert %+v", *rec.cert)
		}
		return
	}
	healing, lost := d.holds(intent, id, forged)
	if lost != nil {
		d.lateResult(ei, intent)
		d.wantErr(a, lost)
		return
	}
	for _, r := range rec.readSet {
		want := r.Seq
		if r.Domain == rec.domain {
			want = rec.seq
		}
		if cur := m.cur(r.Domain); cur != want {
			d.event(intent, fence.EventStale, rec.state)
			rec.state = fence.StateFailed
			rec.reason = fmt.Sprintf("read set went stale while the effect ran: domain %q moved from %d to %d", r.Domain, want, cur)
			d.wantErr(a, fence.StaleReadSetError{Intent: intent, Domain: r.Domain, Expected: want, Actual: cur, Executed: true})
			return
		}
	}
	d.want(a, "", "", "")
	if healing {
		d.event(intent, fence.EventHeal, fence.StateUnknown)
	}
	d.recordCert(ei, intent, rec, res, a.Cert)
}

// recordCert checks a new cert against the claim and the result, and records the intent done.
func (d *diffRun) recordCert(ei int, intent string, rec *mRec, res []byte, c *fence.Cert) {
	if c == nil {
		d.failf("no cert")
		return
	}
	if err := c.Verify(); err != nil {
		d.failf("cert does not verify: %v", err)
	}
	if c.Intent != intent || c.Domain != rec.domain || c.Seq != rec.seq {
		d.failf("cert names intent %q domain %q seq %d; want %q %q %d", c.Intent, c.Domain, c.Seq, intent, rec.domain, rec.seq)
	}
	if rec.keepHash {
		sum, err := fence.ResultSHA256(res)
		if err != nil {
			sum = canon.Sum(res) // no canonical form: the digest of the exact bytes
		}
		if got, ok := c.ResultNotKept(); !ok || got != sum {
			d.failf("a hash-only cert: result %q, want only the digest %s", c.Result, sum)
		}
	} else if !bytes.Equal(c.Result, res) {
		d.failf("cert result %q; want %q byte for byte", c.Result, res)
	}
	rec.state, rec.cert, rec.reason, rec.expired = fence.StateDone, c, "", d.m.brief[ei]
	d.m.certs = append(d.m.certs, c.Hash)
}

func (d *diffRun) opEnd(kind string) diffOp {
	id, forged := d.ticket()
	ei := d.pick(3)
	reason := diffReasons[d.pick(len(diffReasons))]
	intent := d.m.tickets[id].intent
	settle := d.chance(0.2)
	return diffOp{
		what: fmt.Sprintf("p%d %s ticket %d (forged %v, settle %v) of %q reason %q", ei, kind, id, forged, settle, intent, reason),
		run: func(w *diffWorld) answer {
			e, t := w.engs[ei], d.worldTicket(w, id, forged)
			var err error
			switch {
			case settle:
				_, err = e.Settle(bg, fence.Outcome{Kind: fence.OutcomeKind(kind), Ticket: t, Reason: reason})
			case kind == "abort":
				err = e.Abort(bg, t, reason)
			case kind == "release":
				err = e.Release(bg, t, reason)
			default:
				err = e.Lost(bg, t, reason)
			}
			a := errAnswer(err)
			a.Status = d.statusText(w, ei, intent)
			return a
		},
		expect: func(a answer) {
			// Settle reports a release, abort or lost as a retry always (it cannot tell a first
			// report from one whose answer was lost): the same report already recorded is
			// answered as it was. Before 2026-12-06 the model expected lease_lost (seeds
			// 1855782494258 and 6944921203759, 400 steps).
			d.retry = settle
			defer func() { d.retry = false }()
			d.expectEnd(kind, ei, id, forged, intent, reason, a)
		},
	}
}

// expectEnd is the model of an abort, release or lost by engine ei with ticket id.
func (d *diffRun) expectEnd(kind string, ei, id int, forged bool, intent, reason string, a answer) {
	// A claim that went unknown may settle late (heal): abort, release and lost
	// then act on it as on a live claim.
	if _, lost := d.holds(intent, id, forged); lost != nil {
		if d.retry && d.reported(kind, id, intent, reason) {
			// A retry (a spool or held drain) of a report that landed, its answer lost:
			// answered as the first was, writing and counting nothing (docs/DECISIONS-postgres.md,
			// "What the engine's caller sees after CommitUnknownError"). A forged nonce too: the
			// claim's ended record no longer keeps its nonce, so the engine knows the report by
			// its token, kind and reason, and the answer changes nothing (seed 5501518652276).
			d.want(a, "", "", "")
			return
		}
		d.lateResult(ei, intent)
		d.wantErr(a, lost)
		return
	}
	rec := d.m.recs[intent]
	d.want(a, "", "", "")
	reason = asText(reason)
	d.event(intent, kind, rec.state)
	if !forged {
		e := &d.m.events[len(d.m.events)-1]
		e.ended, e.ticket, e.reason = true, id, reason
	}
	switch kind {
	case "release":
		delete(d.m.recs, intent)
	case "abort":
		rec.state, rec.reason, rec.nonce = fence.StateFailed, reason, false
	default:
		rec.state, rec.reason, rec.nonce = fence.StateUnknown, reason, false
	}
}

// reported is the model of fence's reported: the audit trail holds this very report of
// ticket id (its kind, its token, its reason).
func (d *diffRun) reported(kind string, id int, intent, reason string) bool {
	reason = asText(reason)
	// The claim's ended record tells first, as in the engine: an abort or lost left it with
	// its token, its state and the reason, whatever became of the audit trail since.
	if rec := d.m.recs[intent]; rec != nil && rec.ticket == id && !rec.nonce && rec.reason == reason &&
		((kind == "abort" && rec.state == fence.StateFailed) || (kind == "lost" && rec.state == fence.StateUnknown)) {
		return true
	}
	for _, e := range d.m.events {
		if e.ended && e.intent == intent && e.kind == kind && e.ticket == id && e.reason == reason {
			return true
		}
	}
	return false
}

func (d *diffRun) opHeartbeat() diffOp {
	id, forged := d.ticket()
	ei := d.pick(3)
	intent := d.m.tickets[id].intent
	return diffOp{
		what: fmt.Sprintf("p%d heartbeat ticket %d (forged %v) of %q", ei, id, forged, intent),
		run: func(w *diffWorld) answer {
			t, err := w.engs[ei].Heartbeat(bg, d.worldTicket(w, id, forged))
			a := errAnswer(err)
			if err == nil {
				a.Ticket = ticketText(t)
			}
			a.Status = d.statusText(w, ei, intent)
			return a
		},
		expect: func(a answer) {
			healing, lost := d.holds(intent, id, forged)
			if lost != nil {
				d.m.counts[ei].LeaseLost++
				d.wantErr(a, lost)
				return
			}
			rec := d.m.recs[intent]
			d.want(a, "", "", "")
			if healing {
				d.event(intent, fence.EventHeal, fence.StateUnknown)
			}
			// The claim is now held through the process that renewed it (Engine.Heartbeat).
			rec.state, rec.reason, rec.lapsed, rec.owner = fence.StateInFlight, "", d.m.short[ei], ei
		},
	}
}

func (d *diffRun) anyIntent() string {
	if d.chance(0.05) {
		return badIntents[d.pick(len(badIntents))]
	}
	return d.intent()
}

// recordedIntent is, most of the time, an intent the ledger holds (fenced ones first).
func (d *diffRun) recordedIntent() string {
	var fenced, held []string
	for id, r := range d.m.recs {
		if r.state.Fenced() {
			fenced = append(fenced, id)
		} else {
			held = append(held, id)
		}
	}
	sort.Strings(fenced)
	sort.Strings(held)
	switch {
	case len(fenced) > 0 && d.chance(0.6):
		return fenced[d.pick(len(fenced))]
	case len(held) > 0 && d.chance(0.5):
		return held[d.pick(len(held))]
	}
	return d.anyIntent()
}

func (d *diffRun) opStatus() diffOp {
	intent, ei := d.anyIntent(), d.pick(3)
	return diffOp{
		what: fmt.Sprintf("p%d status %q", ei, intent),
		run:  func(w *diffWorld) answer { return answer{Status: d.statusText(w, ei, intent)} },
		expect: func(a answer) {
			want := fence.StateNone
			if rec := d.m.recs[intent]; rec.live() {
				want = rec.state
			}
			if !strings.Contains(a.Status, " state="+string(want)+" ") {
				d.failf("model: want state %s", want)
			}
		},
	}
}

func (d *diffRun) opCurrent() diffOp {
	dom, ei := d.domain(), d.pick(3)
	return diffOp{
		what: fmt.Sprintf("p%d current %q", ei, dom),
		run: func(w *diffWorld) answer {
			seq, err := w.engs[ei].Current(bg, dom)
			a := errAnswer(err)
			a.Seq = seq
			return a
		},
		expect: func(a answer) {
			if a.Code != "" {
				d.failf("model: current of %q failed", dom)
				return
			}
			if want := d.m.cur(dom); a.Seq != want {
				d.failf("model: current %q is %d, want %d", dom, a.Seq, want)
			}
			if a.Seq < d.m.current[dom] {
				d.failf("current %q fell from %d to %d", dom, d.m.current[dom], a.Seq)
			}
			d.m.current[dom] = a.Seq
		},
	}
}

func (d *diffRun) opClear() diffOp {
	intent, ei := d.recordedIntent(), d.pick(3)
	who, reason := diffWho[d.pick(len(diffWho))], diffReasons[d.pick(len(diffReasons))]
	unlessHeld := d.chance(0.5)
	return diffOp{
		what: fmt.Sprintf("p%d clear %q who %q reason %q unless held %v", ei, intent, who, reason, unlessHeld),
		run: func(w *diffWorld) answer {
			clear := w.engs[ei].Clear
			if unlessHeld {
				clear = w.engs[ei].ClearUnlessHeld
			}
			prev, err := clear(bg, intent, who, reason)
			a := errAnswer(err)
			if err == nil {
				a.Ticket = recText(prev)
			}
			a.Status = d.statusText(w, ei, intent)
			return a
		},
		expect: func(a answer) {
			rec := d.m.recs[intent]
			switch {
			case reason == "":
				d.wantErr(a, fence.InvalidError{Field: "reason", Why: "say why the intent is cleared (what you checked in the real system)"})
				return
			case rec == nil:
				d.want(a, "not_found", "", "")
				return
			case unlessHeld && rec.state == fence.StateInFlight:
				if v, _, _ := d.judge(ei, rec); v == vHeld {
					d.wantErr(a, fence.NotFencedError{Intent: intent, State: fence.StateInFlight, Why: fmt.Sprintf("claim 0 is held by process %s until 2000-01-01T00:00:00Z, and its holder may still be running it; wait for its outcome", owners[rec.owner])})
					return
				}
			}
			if why, silent := d.silentHolder(ei, rec); unlessHeld && silent {
				d.wantErr(a, fence.NotFencedError{Intent: intent, State: rec.state, Why: why})
				return
			}
			if why, runs := d.leaseRuns(rec); unlessHeld && runs {
				d.wantErr(a, fence.NotFencedError{Intent: intent, State: rec.state, Why: why})
				return
			}
			if unlessHeld && rec.state == fence.StateDone && !rec.expired {
				d.wantErr(a, fence.NotFencedError{Intent: intent, State: fence.StateDone, Why: "its effect ran and its result is recorded and replayed to duplicates (it may have been settled since you looked: see ledger show); clearing it would have the next attempt run the effect again"})
				return
			}
			d.want(a, "", "", "")
			d.event(intent, fence.EventClear, rec.state)
			delete(d.m.recs, intent)
		},
	}
}

var diffHow = []fence.Resolution{fence.Happened, fence.Happened, fence.Happened, fence.DidNotHappen, fence.LeaveFenced, "did-not-happen", "maybe"}

func (d *diffRun) opResolve() diffOp {
	r := fence.ResolveRequest{Intent: d.recordedIntent(), How: diffHow[d.pick(len(diffHow))], Reason: diffReasons[d.pick(len(diffReasons))], Who: diffWho[d.pick(len(diffWho))], Via: "cli"}
	if r.How == fence.Happened || d.chance(0.1) {
		// Always a result of its own: the default one names the instant of the answer.
		r.Result = d.result()
		if len(r.Result) == 0 {
			r.Result = []byte(`{"ok":true}`)
		}
	}
	if d.chance(0.2) {
		r.Ref = "ch_\u2028ref"
	}
	ei := d.pick(3)
	return diffOp{
		what: fmt.Sprintf("p%d resolve %q how %q reason %q who %q result %q ref %q", ei, r.Intent, r.How, r.Reason, r.Who, trunc(r.Result), r.Ref),
		run: func(w *diffWorld) answer {
			out, err := w.engs[ei].Resolve(bg, r)
			a := errAnswer(err)
			if err == nil {
				a.Cert = certCopy(out.Cert)
				a.Ticket = recText(out.Prev)
				a.Kind = out.Event.Kind + " " + string(out.Event.State) + " " + out.Event.Who + " " + normText(out.Event.Reason)
			}
			a.Status = d.statusText(w, ei, r.Intent)
			return a
		},
		expect: func(a answer) { d.expectResolve(r, ei, a) },
	}
}

func (d *diffRun) expectResolve(r fence.ResolveRequest, ei int, a answer) {
	how, err := fence.ParseResolution(string(r.How))
	switch {
	case err != nil:
		d.wantErr(a, err)
		return
	case strings.TrimSpace(r.Reason) == "":
		d.wantErr(a, fence.InvalidError{Field: "reason", Why: "say what was checked in the real system"})
		return
	case how != fence.Happened && (len(r.Result) > 0 || r.Ref != ""):
		d.wantErr(a, fence.InvalidError{Field: "result", Why: "a result or reference goes with happened only"})
		return
	case len(r.Result) > 0 && !canon.Valid(r.Result):
		d.wantErr(a, fence.InvalidError{Field: "result", Why: "not a JSON value"})
		return
	}
	rec := d.m.recs[r.Intent]
	if !rec.live() {
		d.want(a, "not_found", "", "")
		return
	}
	if why, silent := d.silentHolder(ei, rec); silent && how == fence.DidNotHappen {
		d.wantErr(a, fence.NotFencedError{Intent: r.Intent, State: rec.state, Why: why})
		return
	}
	if why, runs := d.leaseRuns(rec); runs && how == fence.DidNotHappen && rec.state != fence.StateInFlight {
		d.wantErr(a, fence.NotFencedError{Intent: r.Intent, State: rec.state, Why: why})
		return
	}
	switch rec.state {
	case fence.StateDone:
		d.wantErr(a, fence.NotFencedError{Intent: r.Intent, State: fence.StateDone, Why: "its result is recorded and replayed to duplicates"})
		return
	case fence.StateInFlight:
		switch v, ekind, why := d.judge(ei, rec); v {
		case vHeld:
			d.wantErr(a, fence.NotFencedError{Intent: r.Intent, State: fence.StateInFlight, Why: "its holder is running it; wait for its outcome"})
			return
		case vTake:
			d.wantErr(a, fence.NotFencedError{Intent: r.Intent, State: fence.StateInFlight, Why: "it was declared safe to re-run and its holder is gone: the next attempt runs it"})
			return
		default:
			if lw, runs := d.leaseRuns(rec); runs && how == fence.DidNotHappen {
				d.wantErr(a, fence.NotFencedError{Intent: r.Intent, State: fence.StateInFlight, Why: lw})
				return
			}
			d.markUnknown(r.Intent, rec, ekind, why)
		}
	}
	kind := map[fence.Resolution]string{fence.Happened: fence.EventResolveHappened, fence.DidNotHappen: fence.EventResolveDidNotHappen, fence.LeaveFenced: fence.EventResolveLeaveFenced}[how]
	if !strings.HasPrefix(a.Kind, kind+" "+string(rec.state)+" ") || a.Code != "" {
		d.failf("model: want a %s event of a %s intent", kind, rec.state)
	}
	d.event(r.Intent, kind, rec.state)
	switch how {
	case fence.Happened:
		d.recordCert(ei, r.Intent, rec, r.Result, a.Cert)
		rec.nonce = false
	case fence.DidNotHappen:
		delete(d.m.recs, r.Intent)
	}
}

func (d *diffRun) opEvict() diffOp {
	dom, ei := d.domain(), d.pick(3)
	return diffOp{
		what: fmt.Sprintf("p%d evict %q", ei, dom),
		run:  func(w *diffWorld) answer { return errAnswer(w.engs[ei].EvictDomain(bg, dom)) },
		expect: func(a answer) {
			d.want(a, "", "", "")
			if s, ok := d.m.domains[dom]; ok {
				d.m.floor = max(d.m.floor, s)
				delete(d.m.domains, dom)
			}
		},
	}
}

func (d *diffRun) opSweep() diffOp {
	ei := d.pick(3)
	return diffOp{
		what: fmt.Sprintf("p%d sweep", ei),
		run: func(w *diffWorld) answer {
			n, err := w.engs[ei].Sweep(bg)
			a := errAnswer(err)
			a.N = n
			return a
		},
		expect: func(a answer) {
			d.want(a, "", "", "")
			n := 0
			for id, r := range d.m.recs {
				if r.state == fence.StateDone && r.expired {
					delete(d.m.recs, id)
					n++
				}
			}
			if a.N != n {
				d.failf("model: sweep dropped %d records, want %d", a.N, n)
			}
			d.tally["swept records"] += n
			if d.m.brief[ei] { // every event but those kept forever is older than 1 ns
				d.m.events = slices.DeleteFunc(d.m.events, func(e mEvent) bool { return !fence.KeptForever(e.kind) })
			}
		},
	}
}

func (d *diffRun) opRecover() diffOp {
	ei := d.pick(3)
	return diffOp{
		what: fmt.Sprintf("p%d recover", ei),
		run: func(w *diffWorld) answer {
			n, err := w.engs[ei].Recover(bg)
			a := errAnswer(err)
			a.N = n
			return a
		},
		expect: func(a answer) {
			d.want(a, "", "", "")
			d.expectRecover(ei, a.N)
		},
	}
}

// expectRecover is the model of the lease rules Recover applies to every claim in flight,
// which changed n of them.
func (d *diffRun) expectRecover(ei, got int) {
	var ids []string
	for id, r := range d.m.recs {
		if r.state == fence.StateInFlight {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids) // the stores scan in intent (byte) order
	n := 0
	for _, id := range ids {
		switch v, kind, why := d.judge(ei, d.m.recs[id]); v {
		case vFence:
			d.markUnknown(id, d.m.recs[id], kind, why)
			n++
		case vTake:
			d.event(id, fence.EventReclaim, fence.StateInFlight)
			delete(d.m.recs, id)
			n++
		}
	}
	if got != n {
		d.failf("model: recover changed %d claims, want %d", got, n)
	}
}

// opRestart stops every process (each flushes its counters) and starts them again; a durable
// store is closed and opened again, so what follows reads its records back from the database.
func (d *diffRun) opRestart() diffOp {
	return diffOp{
		what: "restart",
		run: func(w *diffWorld) answer {
			for _, e := range w.engs {
				if err := e.Flush(bg); err != nil {
					return errAnswer(err)
				}
			}
			if w.open != nil {
				if err := w.st.Close(); err != nil {
					return errAnswer(err)
				}
				w.st = w.open()
			}
			for i := range w.engs {
				w.engs[i] = fence.New(w.st, w.cfgs[i])
			}
			return answer{}
		},
		expect: func(a answer) {
			d.want(a, "", "", "")
			for i, c := range d.m.counts {
				d.m.before = d.m.before.Add(c)
				d.m.counts[i] = fence.Counters{}
			}
		},
	}
}

func (d *diffRun) opKill() diffOp {
	p, to := d.pick(3), fence.Dead
	if d.chance(0.6) {
		to = fence.CannotTell
	}
	return diffOp{
		what: fmt.Sprintf("process p%d is seen as %s", p, to),
		run:  func(*diffWorld) answer { return answer{} },
		expect: func(answer) {
			d.mu.Lock()
			if d.m.seen[p] != fence.Dead { // the dead stay dead
				d.m.seen[p] = to
			}
			d.mu.Unlock()
		},
	}
}

// opEvents compares the audit trails: whole (reasons normalised) between stores, and intent,
// kind and prior state against the model.
func (d *diffRun) opEvents() diffOp {
	return diffOp{
		what: "events",
		run: func(w *diffWorld) answer {
			var evs []string
			err := w.st.View(bg, func(tx fence.Tx) error {
				evs = evs[:0]
				return tx.Events("", func(ev fence.Event) bool {
					if strings.HasPrefix(ev.Intent, timingPrefix) {
						return true // a timing-dependent step's: checked by the step itself
					}
					evs = append(evs, fmt.Sprintf("%q %s %s who=%q reason=%q at=%v", ev.Intent, ev.Kind, ev.State, ev.Who, normText(ev.Reason), !ev.At.IsZero()))
					return true
				})
			})
			a := errAnswer(err)
			a.Status = strings.Join(evs, "\n")
			return a
		},
		expect: func(a answer) {
			var got []string
			if a.Status != "" {
				for _, line := range strings.Split(a.Status, "\n") {
					got = append(got, line[:strings.Index(line, " who=")])
				}
			}
			var want []string
			for _, e := range d.m.events {
				want = append(want, e.String())
			}
			if !slices.Equal(got, want) {
				d.failf("model: events\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		},
	}
}

// opStats flushes every engine and compares each one's counters since start and the ledger's.
func (d *diffRun) opStats() diffOp {
	return diffOp{
		what: "stats",
		run: func(w *diffWorld) answer {
			var a answer
			var parts []string
			for _, e := range w.engs {
				if err := e.Flush(bg); err != nil {
					return errAnswer(err)
				}
			}
			for _, e := range w.engs {
				s, err := e.Stats(bg)
				if err != nil {
					return errAnswer(err)
				}
				parts = append(parts, fmt.Sprintf("%+v", s.SinceBoot))
				a.Status = fmt.Sprintf("%+v", subCounters(s.Ledger, w.timing))
			}
			a.Ticket = strings.Join(parts, " ")
			return a
		},
		expect: func(a answer) {
			var parts []string
			total := d.m.before.Add(d.m.extra)
			for _, c := range d.m.counts {
				parts = append(parts, fmt.Sprintf("%+v", c))
				total = total.Add(c)
			}
			if want := strings.Join(parts, " "); a.Ticket != want {
				d.failf("model: counters since start\n%s\nwant\n%s", a.Ticket, want)
			}
			if want := fmt.Sprintf("%+v", total); a.Status != want {
				d.failf("model: ledger counters %s, want %s", a.Status, want)
			}
		},
	}
}

// final compares whole ledgers: every record and every domain, then events and counters.
func (d *diffRun) final() {
	dump := func(w *diffWorld) (string, error) {
		var b strings.Builder
		err := w.st.View(bg, func(tx fence.Tx) error {
			b.Reset()
			if err := tx.Scan(fence.Filter{}, func(r *fence.Record) bool {
				b.WriteString(recText(*r) + "\n")
				return true
			}); err != nil {
				return err
			}
			floor, err := tx.DomainFloor()
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "floor=%d\n", floor)
			// Filtered scans: the fenced records, every record two at a time, the expired
			// outcomes oldest first, and the record of each cert hash.
			if err := tx.Scan(fence.Filter{States: []fence.State{fence.StateFailed, fence.StateUnknown}}, func(r *fence.Record) bool {
				fmt.Fprintf(&b, "fenced: %q\n", r.Intent)
				return true
			}); err != nil {
				return err
			}
			for after, more := "", true; more; {
				more = false
				if err := tx.Scan(fence.Filter{After: after, Limit: 2}, func(r *fence.Record) bool {
					fmt.Fprintf(&b, "page after %q: %q\n", after, r.Intent)
					after, more = r.Intent, true
					return true
				}); err != nil {
					return err
				}
			}
			if err := tx.Scan(fence.Filter{States: []fence.State{fence.StateDone}, ExpiresBefore: tx.Now(), ByExpiry: true, Limit: 1000}, func(r *fence.Record) bool {
				fmt.Fprintf(&b, "expired: %q\n", r.Intent)
				return true
			}); err != nil {
				return err
			}
			for _, h := range d.m.certs {
				r, err := tx.CertByHash(h)
				if err != nil {
					return err
				}
				if r != nil {
					fmt.Fprintf(&b, "cert %s: %q\n", h[:12], r.Intent)
				} else {
					fmt.Fprintf(&b, "cert %s: none\n", h[:12])
				}
			}
			for _, dom := range diffDomains {
				s, found, err := tx.DomainSeq(dom)
				if err != nil {
					return err
				}
				fmt.Fprintf(&b, "domain %q=%d found=%v\n", dom, s, found)
			}
			return nil
		})
		return b.String(), err
	}
	var first string
	for k, w := range d.worlds {
		s, err := dump(w)
		if err != nil {
			d.failf("final dump of %s: %v", w.name, err)
			return
		}
		if k == 0 {
			first = s
		} else if s != first {
			d.failf("final ledgers differ:\n%s:\n%s\n%s:\n%s", d.worlds[0].name, first, w.name, s)
			return
		}
	}
	var want strings.Builder
	ids := make([]string, 0, len(d.m.recs))
	for id := range d.m.recs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintf(&want, "intent=%q state=%s\n", id, d.m.recs[id].state)
	}
	var got strings.Builder
	for _, line := range strings.Split(first, "\n") {
		if strings.HasPrefix(line, "intent=") {
			got.WriteString(line[:strings.Index(line, " fp=")] + "\n")
		}
	}
	if got.String() != want.String() {
		d.failf("model: final records\n%s\nwant\n%s", got.String(), want.String())
	}
	for _, op := range []diffOp{d.opEvents(), d.opStats()} {
		if !d.step(-1, op) {
			return
		}
	}
}
