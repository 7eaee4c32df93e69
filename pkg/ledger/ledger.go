// Package ledger is the operator's view of a fence ledger, whatever store holds it: listing
// intents, showing one with its audit trail, verifying certificates and their parent links, and
// exporting. It reads through fence.Store transactions and never changes anything; clearing and
// sweeping go through the engine (fence.Engine.Clear, Sweep), which records them.
package ledger

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strings"
	"time"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
)

// States lists the states an intent can be recorded in.
var States = []fence.State{fence.StateInFlight, fence.StateDone, fence.StateFailed, fence.StateUnknown}

// ParseState accepts a state name, or "fenced" for failed and unknown.
func ParseState(s string) ([]fence.State, error) {
	switch s {
	case "fenced":
		return []fence.State{fence.StateFailed, fence.StateUnknown}, nil
	case "in-flight":
		return []fence.State{fence.StateInFlight}, nil
	}
	for _, st := range States {
		if string(st) == s {
			return []fence.State{st}, nil
		}
	}
	return nil, fmt.Errorf("unknown state %q: want in_flight, done, failed, unknown or fenced", s)
}

// UnreadableRecords is the error of a view that read every record (and audit event) it could
// but not these: their stored bytes do not decode (damaged, or edited by hand). What the view
// returned or wrote is complete but for them. Events holds the audit events left out (show
// and export read events; the other views read none).
type UnreadableRecords struct {
	Records []*fence.UnreadableError
	Events  []*fence.UnreadableEventError
}

func (u *UnreadableRecords) Error() string {
	var parts []string
	if len(u.Records) > 0 {
		names := make([]string, len(u.Records))
		for i, r := range u.Records {
			names[i] = fmt.Sprintf("%q", r.Intent)
		}
		parts = append(parts, fmt.Sprintf("%d record(s) could not be read and are left out: %s", len(u.Records), strings.Join(names, ", ")))
	}
	if len(u.Events) > 0 {
		names := make([]string, len(u.Events))
		for i, e := range u.Events {
			names[i] = fmt.Sprintf("%d (of %q)", e.ID, e.Intent)
		}
		parts = append(parts, fmt.Sprintf("%d audit event(s) could not be read and are left out: %s", len(u.Events), strings.Join(names, ", ")))
	}
	return strings.Join(parts, "; ")
}

// unreadable collects the records and events a view could not read; err is what it returns.
type unreadable struct {
	recs []*fence.UnreadableError
	evs  []*fence.UnreadableEventError
}

func (u *unreadable) add(e *fence.UnreadableError)           { u.recs = append(u.recs, e) }
func (u *unreadable) addEvent(e *fence.UnreadableEventError) { u.evs = append(u.evs, e) }

func (u *unreadable) err() error {
	if len(u.recs) == 0 && len(u.evs) == 0 {
		return nil
	}
	return &UnreadableRecords{Records: u.recs, Events: u.evs}
}

// events is tx.Events, leaving out an event that does not decode and telling bad of it where
// the store can tell one (fence.EventsSkipping: the SQL stores).
func events(tx fence.Tx, intent string, fn func(fence.Event) bool, bad *unreadable) error {
	if s, ok := tx.(fence.EventsSkipping); ok {
		return s.EventsSkipping(intent, fn, bad.addEvent)
	}
	return tx.Events(intent, fn)
}

// List returns the records in the given states (all when none are given), in intent order.
// Records that do not decode are left out and named by an *UnreadableRecords error, returned
// with the others. It holds every record it returns: Walk reads a ledger of any size.
func List(ctx context.Context, st fence.Store, states []fence.State) ([]fence.Record, error) {
	var out []fence.Record
	var bad unreadable
	err := st.View(ctx, func(tx fence.Tx) error {
		out, bad = out[:0], unreadable{}
		return tx.Scan(fence.Filter{States: states, Unreadable: bad.add}, func(r *fence.Record) bool {
			out = append(out, *r)
			return true
		})
	})
	if err != nil {
		return out, err
	}
	return out, bad.err()
}

// A Pass is one read of the records by Walk. Start, when set, is called before the pass reads
// a record, with the ledger's clock in the read transaction (see Detail.Now); Record with each
// record the pass reads (the record is the scan's: copy what outlives the call); End, when set,
// once the pass has read every one, with the *UnreadableRecords error that names the records
// it could not read, or nil. An error any of them returns ends the walk with it.
type Pass struct {
	Start  func(now time.Time) error
	Record func(*fence.Record) error
	End    func(unreadable error) error
}

// Walk reads the records in the given states (all when none are given), in intent order, once
// for each pass, every pass in the one read transaction: each sees the same records (the
// store's snapshot), so a first pass can measure what a second writes. It holds one page of
// the store's scan at a time, however many records the ledger has (List holds them all).
// Records that do not decode are left out of every pass; once every pass ended, Walk returns
// the *UnreadableRecords error that names them (the first pass's: each reads the same).
//
// A store may run a read transaction again when its first round trip found the connection
// dead (before any record was read). A transaction run again after a pass has been given a
// record fails instead: what the passes wrote cannot be taken back.
func Walk(ctx context.Context, st fence.Store, states []fence.State, passes ...Pass) error {
	var bad unreadable
	given := false // a pass has been given a record or its end
	err := st.View(ctx, func(tx fence.Tx) error {
		if given {
			return errors.New("ledger: the store ran the read again after records were shown; what was shown may be incomplete: look again")
		}
		bad = unreadable{}
		for i, p := range passes {
			collect := func(*fence.UnreadableError) {}
			if i == 0 {
				collect = bad.add
			}
			if p.Start != nil {
				if err := p.Start(tx.Now()); err != nil {
					return err
				}
			}
			var perr error
			err := tx.Scan(fence.Filter{States: states, Unreadable: collect}, func(r *fence.Record) bool {
				given = true
				perr = p.Record(r)
				return perr == nil
			})
			if err != nil {
				return err
			}
			if perr != nil {
				return perr
			}
			if p.End != nil {
				given = true
				if err := p.End(bad.err()); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return bad.err()
}

// Detail is one intent's record and its audit trail.
type Detail struct {
	Record fence.Record  `json:"record"`
	Events []fence.Event `json:"events"`
	// EventsLeftOut counts the older events ShowLast left out of Events.
	EventsLeftOut int `json:"events_left_out,omitempty"`
	// Now is the ledger's clock when it was read (tx.Now: on PostgreSQL the database's, which
	// every lease and expiry in it is set and judged by). Judge Record's lease against it,
	// as clear and resolve do, not against this host's clock.
	Now time.Time `json:"-"`
}

// Show returns an intent's record (State none when there is none) and every audit event about
// it, including those of earlier claims that were cleared or released.
func Show(ctx context.Context, st fence.Store, intent string) (Detail, error) {
	return ShowLast(ctx, st, intent, 0)
}

// ShowLast is Show with at most the last n audit events (every one when n <= 0), oldest first;
// EventsLeftOut counts the older ones. It holds no more than n events at once, however many the
// intent has. Events that do not decode are left out, and named by an *UnreadableRecords error
// returned with the rest.
func ShowLast(ctx context.Context, st fence.Store, intent string, n int) (Detail, error) {
	var d Detail
	var bad unreadable
	err := st.View(ctx, func(tx fence.Tx) error {
		d, bad = Detail{Record: fence.Record{Intent: intent, State: fence.StateNone}, Events: []fence.Event{}}, unreadable{}
		rec, err := tx.Get(intent)
		if err != nil {
			return err
		}
		d.Now = tx.Now() // after the read, which began the transaction: no round trip of its own
		if rec != nil {
			d.Record = *rec
		}
		seen := 0
		err = events(tx, intent, func(ev fence.Event) bool {
			seen++
			if n > 0 && len(d.Events) == n {
				// A ring: the oldest kept is overwritten; put in order below.
				d.Events[(seen-1)%n] = ev
				return true
			}
			d.Events = append(d.Events, ev)
			return true
		}, &bad)
		if n > 0 && seen > n {
			d.EventsLeftOut = seen - n
			at := seen % n // the oldest kept
			d.Events = slices.Concat(d.Events[at:], d.Events[:at])
		}
		return err
	})
	if err == nil {
		err = bad.err()
	}
	return d, err
}

// Problem is one thing Verify found wrong (or could not resolve) about a record.
type Problem struct {
	Intent string `json:"intent"`
	Hash   string `json:"hash,omitempty"`
	What   string `json:"what"`
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	Records int `json:"records"`
	Certs   int `json:"certs"`
	// Verified certs recompute to their recorded hash and agree with their record.
	Verified int `json:"verified"`
	// Parents counts certs with a parent; Linked those whose parent is another cert in the
	// ledger.
	Parents int `json:"parents"`
	Linked  int `json:"linked"`
	// Problems make verification fail. Unresolved parents do not: a parent's outcome may have
	// been swept after its result TTL.
	Problems   []Problem `json:"problems"`
	Unresolved []Problem `json:"unresolved_parents"`
	// Events counts the audit events of an export (VerifyExport); Verify reads none.
	Events int `json:"events,omitempty"`
}

// OK reports whether verification found no problem.
func (r VerifyReport) OK() bool { return len(r.Problems) == 0 }

// Verify recomputes the hash of every cert in the ledger, checks that each done record's cert
// agrees with the record (intent, tool, args, domain, sequence, parent, agent, vector clock,
// read set, and the result kept as its keep_result says) and the record's fingerprint with its
// tool and args, and checks every
// parent link: a parent must be the hash of another cert. A parent that is well formed but no
// longer in the ledger is listed as unresolved. A record that does not decode is a problem
// (its cert, if it has one, cannot be checked); the others are still verified.
func Verify(ctx context.Context, st fence.Store) (VerifyReport, error) {
	var rep VerifyReport
	err := st.View(ctx, func(tx fence.Tx) error {
		v := newVerifier()
		err := tx.Scan(fence.Filter{Unreadable: v.unreadable}, v.record)
		if err != nil {
			return err
		}
		if f, ok := tx.(fence.Filing); ok {
			err := f.Filing(func(intent string, state fence.State, hash string) bool {
				if v.bad[intent] {
					return true // reported above
				}
				f := v.filed(intent)
				if p := f.differs(state, hash); p != "" {
					v.rep.Problems = append(v.rep.Problems, Problem{Intent: intent, Hash: f.hash, What: p})
				}
				return true
			})
			if err != nil {
				return err
			}
		}
		rep = v.finish()
		return nil
	})
	return rep, err
}

// verifier checks records one at a time (record, unreadable) and their parent links once
// every record is known (finish).
type verifier struct {
	rep VerifyReport
	// A cert is checked as it is given, and only what its parent link needs once every cert
	// is known is kept (three strings), not the record: verify holds a hash per done cert and
	// a link per cert with a parent, not the ledger's records.
	links []link
	// byHash resolves parent links from the records given rather than a lookup per parent
	// (CertByHash), which a store may answer only by scanning again: the first done record,
	// in intent order, whose cert has the hash.
	byHash map[digest]name
	// filing holds what each record with a cert or done says it is filed under (oddHash the
	// hash of a cert whose hash is not one), and bad the intents of records that could not be
	// read, for the store's filing (fence.Filing).
	filing  map[name]filedAs
	oddHash map[name]string
	bad     map[string]bool
}

// The two maps verify keeps an entry in per record hold no string: an intent is its name and a
// cert hash its 32 bytes, and the collector has no pointer in them to follow. Measured on a
// SQLite ledger of 200,000 done records with 1 KB results (865 MB): `ledger verify` peaked at
// 161 MB of resident memory with both maps keyed and valued by strings, 126 MB before the
// filing check (byHash alone), and 101 MB as kept here.

// name is an intent as verify keeps it: the first 16 bytes of its SHA-256 (two intents of one
// ledger share a name with a chance of about n²/2¹²⁹).
type name [16]byte

func nameOf(intent string) name {
	s := sha256.Sum256([]byte(intent))
	return name(s[:16])
}

// digest is a cert hash that is one (isHash), as its 32 bytes.
type digest [32]byte

func digestOf(h string) (digest, bool) {
	var d digest
	if !isHash(h) {
		return d, false
	}
	_, err := hex.Decode(d[:], []byte(h))
	return d, err == nil
}

// filedAs is filed as kept: the hash as its bytes; odd when the cert's hash is no hash (kept in
// oddHash).
type filedAs struct {
	hash            digest
	cert, odd, done bool
}

// filed is what the record of intent holds of its filing (zero when it has no cert and is not
// done).
func (v *verifier) filed(intent string) filed {
	n := nameOf(intent)
	f, ok := v.filing[n]
	switch {
	case !ok:
		return filed{}
	case f.odd:
		return filed{v.oddHash[n], f.done}
	case f.cert:
		return filed{hex.EncodeToString(f.hash[:]), f.done}
	}
	return filed{"", f.done}
}

type link struct{ intent, hash, parent string }

func newVerifier() *verifier {
	return &verifier{rep: VerifyReport{Problems: []Problem{}, Unresolved: []Problem{}},
		byHash: map[digest]name{}, filing: map[name]filedAs{}, oddHash: map[name]string{}, bad: map[string]bool{}}
}

func (v *verifier) unreadable(u *fence.UnreadableError) {
	v.bad[u.Intent] = true
	v.rep.Records++
	v.rep.Problems = append(v.rep.Problems, Problem{Intent: u.Intent, What: "the record cannot be read: " + u.Error()})
}

// record checks one record; it always returns true (a Scan's callback).
func (v *verifier) record(r *fence.Record) bool {
	rep := &v.rep
	rep.Records++
	if r.State == fence.StateDone && r.Cert == nil {
		v.filing[nameOf(r.Intent)] = filedAs{done: true}
	}
	if p := checkRecord(r); p != "" {
		rep.Problems = append(rep.Problems, Problem{Intent: r.Intent, What: p})
	}
	c := r.Cert
	if c == nil {
		return true
	}
	n := nameOf(r.Intent)
	d, isDigest := digestOf(c.Hash)
	if _, seen := v.byHash[d]; isDigest && !seen && r.State == fence.StateDone {
		v.byHash[d] = n
	}
	v.filing[n] = filedAs{hash: d, cert: true, odd: !isDigest, done: r.State == fence.StateDone}
	if !isDigest {
		v.oddHash[n] = c.Hash
	}
	rep.Certs++
	bad := false
	if err := c.Verify(); err != nil {
		rep.Problems = append(rep.Problems, Problem{Intent: r.Intent, Hash: c.Hash, What: err.Error()})
		bad = true
	}
	if p := certAgrees(r); p != "" {
		rep.Problems = append(rep.Problems, Problem{Intent: r.Intent, Hash: c.Hash, What: p})
		bad = true
	}
	if !bad {
		rep.Verified++
	}
	if c.Parent != "" {
		v.links = append(v.links, link{r.Intent, c.Hash, c.Parent})
	}
	return true
}

// finish checks the parent links and returns the report.
func (v *verifier) finish() VerifyReport {
	rep := &v.rep
	for _, l := range v.links {
		rep.Parents++
		if !isHash(l.parent) {
			rep.Problems = append(rep.Problems, Problem{Intent: l.intent, Hash: l.hash, What: fmt.Sprintf("parent %q is not a cert hash (64 lowercase hex digits)", l.parent)})
			continue
		}
		if l.parent == l.hash {
			rep.Problems = append(rep.Problems, Problem{Intent: l.intent, Hash: l.hash, What: "the cert names itself as its parent"})
			continue
		}
		d, _ := digestOf(l.parent) // a hash: isHash above
		parent, found := v.byHash[d]
		switch {
		case !found:
			rep.Unresolved = append(rep.Unresolved, Problem{Intent: l.intent, Hash: l.hash, What: fmt.Sprintf("parent %s is not in the ledger (swept after its result TTL, or never recorded here)", l.parent)})
		case parent == nameOf(l.intent):
			rep.Problems = append(rep.Problems, Problem{Intent: l.intent, Hash: l.hash, What: "the parent is a cert of the same intent"})
		default:
			rep.Linked++
		}
	}
	return *rep
}

// filed is what a record says of the columns a store files it under (fence.Filing): its
// cert's hash ("" without a cert) and whether it is done.
type filed struct {
	hash string
	done bool
}

// differs reports a record filed under another cert hash or state than it holds (f). The hash
// is unkeyed: a cert edited by hand and hashed again verifies alone, and agrees with its
// record when what was edited is its result, but the hash its row was filed under when the
// engine recorded it stays. Filed under another hash, the record is not found by its cert's
// (CertByHash); filed as done or not otherwise than it is, it is not found by its state (ls
// --state, the recovery of claims).
func (f filed) differs(state fence.State, hash string) string {
	switch {
	case hash != f.hash && f.hash == "":
		return fmt.Sprintf("the record is filed under cert hash %s but holds no cert", hash)
	case hash != f.hash:
		under := "no cert hash"
		if hash != "" {
			under = "cert hash " + hash
		}
		return fmt.Sprintf("the record is filed under %s, but its cert's hash is %s: the cert was changed after it was recorded (or the row was)", under, f.hash)
	case f.done && state != fence.StateDone:
		return fmt.Sprintf("the record is done but filed as %q", state)
	case !f.done && state == fence.StateDone:
		return "the record is filed as done but is not done"
	}
	return ""
}

// checkRecord reports a record whose state and contents disagree.
func checkRecord(r *fence.Record) string {
	switch r.State {
	case fence.StateDone:
		if r.Cert == nil {
			return "the intent is done but has no cert"
		}
	case fence.StateInFlight, fence.StateFailed, fence.StateUnknown:
		if r.Cert != nil {
			return fmt.Sprintf("the intent is %s but carries a cert", r.State)
		}
	default:
		return fmt.Sprintf("unknown state %q", r.State)
	}
	// With redacted fields the ledger keeps "[redacted]" where the fingerprint saw the values,
	// so the fingerprint cannot be recomputed (the cert's hash still binds the args kept). Args
	// an earlier build's store re-escaped were fingerprinted before they were stored.
	args := r.Args
	if c, ok := fence.CanonicalOfEscapedArgs(args); ok {
		args = c
	}
	if fp := canon.Sum(canon.ToolCallCanonical(r.Tool, args)); fp != r.Fingerprint && len(r.Redacted) == 0 {
		return fmt.Sprintf("the recorded fingerprint %s does not match its tool and args (%s)", r.Fingerprint, fp)
	}
	return ""
}

// certAgrees reports a cert that does not describe its own record.
func certAgrees(r *fence.Record) string {
	c := r.Cert
	var diff []string
	if c.Intent != r.Intent && !fence.IsSupersededName(r.Intent, c.Intent, c.Hash) {
		diff = append(diff, fmt.Sprintf("intent %q", c.Intent))
	}
	if c.Tool != r.Tool {
		diff = append(diff, fmt.Sprintf("tool %q", c.Tool))
	}
	if string(c.Args) != string(r.Args) {
		diff = append(diff, "args")
	}
	if c.Domain != r.Domain || c.Seq != r.Seq {
		diff = append(diff, fmt.Sprintf("domain %q seq %d", c.Domain, c.Seq))
	}
	if c.Parent != r.Parent {
		diff = append(diff, fmt.Sprintf("parent %q", c.Parent))
	}
	// The hash covers these too, but it is unkeyed: a cert edited and hashed again verifies
	// alone, and only the record says whom and what state the claim was admitted with.
	if c.Agent != r.Agent {
		diff = append(diff, fmt.Sprintf("agent %q", c.Agent))
	}
	if clock := c.Clock.Canonical(); string(clock) != string(r.Clock.Canonical()) {
		diff = append(diff, "vector_clock "+string(clock))
	}
	if !slices.Equal(c.ReadSet, r.ReadSet) { // nil and empty alike
		rs, _ := json.Marshal(c.ReadSet)
		diff = append(diff, "read_set "+string(rs))
	}
	if len(diff) != 0 {
		return "the cert disagrees with its record: " + strings.Join(diff, ", ")
	}
	return keptAsRecorded(r)
}

// keptAsRecorded reports a cert that keeps its result otherwise than its record says. The hash
// binds result_sha256, not the result, and Cert.Verify skips the result's digest for a cert
// holding the object of keep-result hash ({"effectfence/result_not_kept":…}): put in place of a
// kept result, that object verified, and the result was gone.
func keptAsRecorded(r *fence.Record) string {
	c := r.Cert
	if c.ResultSHA256 == "" {
		return "" // a cert from before result_sha256 (and keep_result): its hash covers result
	}
	_, digestOnly := c.ResultNotKept() // the object in any form: Cert.Verify checks its bytes
	switch {
	case r.KeepResult == fence.KeepHash && !digestOnly:
		return "the record keeps only its result's digest (keep_result hash), but its cert holds a result"
	case r.KeepResult != fence.KeepHash && digestOnly && canon.Sum(c.Result) != c.ResultSHA256:
		// (A tool's result may be that very object: then it is its own result_sha256.)
		return fmt.Sprintf("the record keeps its result in full, but its cert holds only a digest of it in place of the result (result_sha256 %s)", c.ResultSHA256)
	}
	return ""
}

func isHash(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// ExportLine is one line of an export: exactly one of Record, Event and End is set.
type ExportLine struct {
	Record *fence.Record `json:"record,omitempty"`
	Event  *fence.Event  `json:"event,omitempty"`
	End    *ExportEnd    `json:"end,omitempty"`
}

// ExportEnd is the last line of an export written whole: what it holds. An export cut short
// (a full disk, a killed reader, a truncated copy) ends without it, and reads like a smaller
// ledger otherwise. Exports of effectfence before 2026-12-07 had no end line.
type ExportEnd struct {
	Records int `json:"records"`
	Events  int `json:"events"`
	// UnreadableRecords and UnreadableEvents count what the ledger held and the export left
	// out: their stored bytes did not decode.
	UnreadableRecords int `json:"unreadable_records,omitempty"`
	UnreadableEvents  int `json:"unreadable_events,omitempty"`
	// SHA256 is the SHA-256 (lowercase hex) of every byte of the export before its end line,
	// so a line changed after it was written (a flipped bit, an edit by hand) is told, audit
	// events included, which have no cert of their own. It guards against accident, not
	// intent: whoever edits an export can compute it again. Exports of effectfence before
	// 2026-12-07 have none.
	SHA256 string `json:"sha256,omitempty"`
}

// Export writes the ledger as JSON Lines: every record (in intent order), then every audit
// event (oldest first), one object per line, then the end line (ExportEnd), all from one read
// transaction. It returns the number of record and event lines. Records and events that do
// not decode are left out, counted in the end line, and named by an *UnreadableRecords error
// once the rest is written. An export that fails before its end has no end line, and so
// has one of a store read at rest (sqlite.Options.AtRest) that a process opened or changed
// while it was read.
func Export(ctx context.Context, st fence.Store, w io.Writer) (int, error) {
	n := 0
	// Each line is written as safetext.JSON has it (the same JSON: no character in it can act
	// on a terminal), which is what the end line's digest is of.
	sum := sha256.New()
	var line bytes.Buffer
	enc := json.NewEncoder(&line)
	enc.SetEscapeHTML(false)
	write := func(l ExportLine) error {
		line.Reset()
		if err := enc.Encode(l); err != nil {
			return err
		}
		b := safetext.JSON(line.Bytes())
		sum.Write(b)
		_, err := w.Write(b)
		return err
	}
	var werr error
	var bad unreadable
	var end ExportEnd
	err := st.View(ctx, func(tx fence.Tx) error {
		bad, end = unreadable{}, ExportEnd{}
		sum.Reset()
		err := tx.Scan(fence.Filter{Unreadable: bad.add}, func(r *fence.Record) bool {
			if werr = write(ExportLine{Record: r}); werr != nil {
				return false
			}
			n++
			end.Records++
			return true
		})
		if err != nil || werr != nil {
			return err
		}
		return events(tx, "", func(ev fence.Event) bool {
			if werr = write(ExportLine{Event: &ev}); werr != nil {
				return false
			}
			n++
			end.Events++
			return true
		}, &bad)
	})
	if err == nil {
		err = werr
	}
	if at, ok := st.(atRest); ok && err == nil {
		// Read at rest (a SQLite ledger on a full disk, say): a process that opened or changed
		// the ledger meanwhile may have mixed two of its states into what was written, which
		// then gets no end line, as an export cut short.
		if what := at.StillAtRest(); what != "" {
			err = fmt.Errorf("%s: the lines written, read at rest, may mix its states before and after", what)
		}
	}
	if err == nil {
		end.UnreadableRecords, end.UnreadableEvents = len(bad.recs), len(bad.evs)
		end.SHA256 = hex.EncodeToString(sum.Sum(nil))
		err = write(ExportLine{End: &end})
	}
	if err == nil {
		err = bad.err()
	}
	return n, err
}

// atRest is a store read at rest (a SQLite store opened with AtRest): StillAtRest says what
// changed since it was opened that may have changed what it read, "" when nothing did.
type atRest interface{ StillAtRest() string }

// VerifyExport verifies an export (Export's JSON Lines) as Verify verifies a ledger: every
// record's cert, its agreement with its record, and the parent links among the records the
// export holds. It also reports an export that is not whole: one without its end line (cut
// short at a line's end, or written by effectfence before 2026-12-07), one whose last line
// is cut, one whose end line counts other records or events than it holds or counts
// records or events left out, and one whose lines do not hash to its end line's sha256. A line that is not an export's (a cert that does not decode as
// fence.Cert reads it, among them) is a problem, and the next line is read. The error is
// only r's.
func VerifyExport(r io.Reader) (VerifyReport, error) {
	v := newVerifier()
	problem := func(format string, a ...any) {
		v.rep.Problems = append(v.rep.Problems, Problem{What: fmt.Sprintf(format, a...)})
	}
	const cut = "the export was cut short (a full disk, a killed reader, a truncated copy): export the ledger again"
	br := bufio.NewReader(r)
	sum := sha256.New()
	var before string // the hash of the lines before the end line
	var end *ExportEnd
	events, line, whole := 0, 0, true
	for {
		b, err := br.ReadBytes('\n')
		if err != nil && err != io.EOF {
			return v.rep, err
		}
		if len(b) == 0 {
			break
		}
		line++
		if err == io.EOF {
			problem("line %d ends without a line end after %d bytes: %s", line, len(b), cut)
			whole = false
			break
		}
		if end != nil {
			problem("line %d follows the end line: an export ends with its end line", line)
			break
		}
		before = hex.EncodeToString(sum.Sum(nil))
		sum.Write(b)
		var l ExportLine
		if err := json.Unmarshal(b, &l); err != nil {
			problem("line %d is not a line of an export: %v", line, err)
			continue
		}
		set := 0
		for _, ok := range []bool{l.Record != nil, l.Event != nil, l.End != nil} {
			if ok {
				set++
			}
		}
		switch {
		case set != 1:
			problem("line %d is not a line of an export: it holds not exactly one of record, event and end", line)
		case l.Record != nil:
			if l.Record.Intent == "" {
				problem("line %d is a record without an intent", line)
				continue
			}
			v.record(l.Record)
		case l.Event != nil:
			events++
		default:
			end = l.End
		}
	}
	switch {
	case end == nil && whole:
		problem("the export has no end line: it was cut short at a line's end (a full disk, a killed reader, a truncated copy), or written by effectfence before 2026-12-07, whose exports ended without one; export the ledger again to have one that can be told whole")
	case end == nil:
	case end.Records != v.rep.Records || end.Events != events:
		problem("the end line counts %d record(s) and %d event(s); the export holds %d and %d", end.Records, end.Events, v.rep.Records, events)
	}
	if end != nil && end.SHA256 != "" && end.SHA256 != before {
		problem("the export's lines were changed after it was written: they hash to sha256 %s, its end line says %s (export the ledger again)", before, end.SHA256)
	}
	if end != nil && end.UnreadableRecords+end.UnreadableEvents > 0 {
		problem("the ledger held %d record(s) and %d audit event(s) that could not be read, left out of this export (the export named them on stderr; effectfence ledger check finds them)", end.UnreadableRecords, end.UnreadableEvents)
	}
	rep := v.finish()
	rep.Events = events
	return rep, nil
}

// CountStates counts the records in each state. Records that do not decode are not counted,
// and are named by an *UnreadableRecords error, returned with the counts of the others.
func CountStates(ctx context.Context, st fence.Store) (map[fence.State]int, error) {
	out := map[fence.State]int{}
	var bad unreadable
	err := st.View(ctx, func(tx fence.Tx) error {
		clear(out)
		bad = unreadable{}
		return tx.Scan(fence.Filter{Unreadable: bad.add}, func(r *fence.Record) bool {
			out[r.State]++
			return true
		})
	})
	if err != nil {
		return out, err
	}
	return out, bad.err()
}

// Operator names who runs this process, as "user@host", for the audit trail of a clear.
func Operator() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = fmt.Sprintf("uid%d", os.Getuid())
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return name + "@" + host
}
