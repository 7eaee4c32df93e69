package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
)

var ctx = context.Background()

func committed(t *testing.T, eng *fence.Engine, r fence.Request) *fence.Cert {
	t.Helper()
	adm, err := eng.Prepare(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	c, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// edit replaces a stored record behind the engine's back.
func edit(t *testing.T, st fence.Store, intent string, fn func(*fence.Record)) {
	t.Helper()
	err := st.Update(ctx, func(tx fence.Tx) error {
		rec, err := tx.Get(intent)
		if err != nil {
			return err
		}
		r := *rec
		if r.Cert != nil {
			c := *r.Cert
			r.Cert = &c
		}
		fn(&r)
		return tx.Put(&r)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestVerifyFindsEachProblem(t *testing.T) {
	st := fence.NewMemoryStore()
	eng := fence.New(st, fence.Config{})
	p := committed(t, eng, fence.Request{Intent: "p", Tool: "t", Args: []byte(`1`)})
	committed(t, eng, fence.Request{Intent: "child", Tool: "t", Args: []byte(`2`), Parent: p.Hash})
	rep, err := ledger.Verify(ctx, st)
	if err != nil || !rep.OK() || rep.Certs != 2 || rep.Verified != 2 || rep.Linked != 1 {
		t.Fatalf("healthy ledger: %+v %v", rep, err)
	}

	cases := []struct {
		name string
		fn   func(*fence.Record)
		want string
	}{
		{"tampered result", func(r *fence.Record) { r.Cert.Result = []byte(`{"ok":false}`) }, "does not verify"},
		{"re-hashed cert of other args", func(r *fence.Record) {
			r.Cert.Args = []byte(`3`)
			r.Cert.Hash, _ = r.Cert.ComputeHash()
		}, "disagrees with its record: args"},
		{"fingerprint", func(r *fence.Record) { r.Args = []byte(`4`) }, "fingerprint"},
		{"malformed parent", func(r *fence.Record) {
			r.Parent, r.Cert.Parent = "nope", "nope"
			r.Cert.Hash, _ = r.Cert.ComputeHash()
		}, "not a cert hash"},
		{"done without cert", func(r *fence.Record) { r.Cert = nil }, "no cert"},
		// The hash covers agent, vector clock and read set, and so does a re-hash: only the
		// record tells what the claim was admitted with.
		{"re-hashed cert of another agent", func(r *fence.Record) {
			r.Cert.Agent = "mallory"
			r.Cert.Hash, _ = r.Cert.ComputeHash()
		}, `disagrees with its record: agent "mallory"`},
		{"re-hashed cert of another clock", func(r *fence.Record) {
			r.Cert.Clock = fence.VectorClock{"alice": 1, "mallory": 9}
			r.Cert.Hash, _ = r.Cert.ComputeHash()
		}, `disagrees with its record: vector_clock {"alice":1,"mallory":9}`},
		{"re-hashed cert of another read set", func(r *fence.Record) {
			r.Cert.ReadSet = []fence.ReadSetEntry{{Domain: "stock", Seq: 8}}
			r.Cert.Hash, _ = r.Cert.ComputeHash()
		}, `disagrees with its record: read_set [{"domain":"stock","seq":8}]`},
		// The hash binds result_sha256 only, and a cert of keep-result hash holds an object in
		// place of its result: put in a cert that kept its result, that object verifies as a
		// cert, with no re-hash, and the result is gone.
		{"result replaced by the keep-result hash object", func(r *fence.Record) {
			r.Cert.Result = []byte(`{"effectfence/result_not_kept":{"sha256":"` + r.Cert.ResultSHA256 + `"}}`)
		}, "keeps its result in full, but its cert holds only a digest"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := fence.NewMemoryStore()
			eng := fence.New(st, fence.Config{})
			committed(t, eng, fence.Request{Intent: "x", Tool: "t", Args: []byte(`2`), Agent: "alice", Domain: "order:1",
				ReadSet: []fence.ReadSetEntry{{Domain: "stock", Seq: 0}}})
			edit(t, st, "x", tc.fn)
			rep, err := ledger.Verify(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() || !strings.Contains(rep.Problems[0].What, tc.want) {
				t.Fatalf("problems %+v; want one saying %q", rep.Problems, tc.want)
			}
		})
	}
}

// A record with redacted fields verifies: its args hold "[redacted]" where the fingerprint saw
// the values, so its fingerprint cannot be recomputed and is not a problem; its cert still
// binds the args it keeps, so an edit of them is.
func TestVerifyRedactedRecords(t *testing.T) {
	st := fence.NewMemoryStore()
	eng := fence.New(st, fence.Config{})
	committed(t, eng, fence.Request{Intent: "r", Tool: "pay", Args: []byte(`{"card":{"number":"4242"},"amount":5}`), Redact: []string{"card.number"}})
	if _, err := eng.Prepare(ctx, fence.Request{Intent: "held", Tool: "pay", Args: []byte(`{"card":{"number":"4343"}}`), Redact: []string{"card.number"}}); err != nil {
		t.Fatal(err)
	}
	rep, err := ledger.Verify(ctx, st)
	if err != nil || !rep.OK() || rep.Verified != 1 {
		t.Fatalf("a ledger with redacted records: %+v %v", rep, err)
	}
	edit(t, st, "r", func(r *fence.Record) { r.Args = []byte(`{"amount":6,"card":{"number":"[redacted]"}}`) })
	if rep, err := ledger.Verify(ctx, st); err != nil || rep.OK() || !strings.Contains(rep.Problems[0].What, "args") {
		t.Fatalf("edited args of a redacted record: %+v %v", rep, err)
	}
}

// A record of keep-result hash verifies with its cert holding only the result's digest; a cert
// that holds a result there (the one the tool returned: its digest is result_sha256, which the
// hash binds) is what the claim asked the ledger not to keep, and is a problem.
func TestVerifyKeepResultHashRecords(t *testing.T) {
	st := fence.NewMemoryStore()
	eng := fence.New(st, fence.Config{})
	committed(t, eng, fence.Request{Intent: "k", Tool: "t", KeepResult: fence.KeepHash})
	// A tool may return that very object as its result, kept in full: it is its own digest.
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "lookalike", Tool: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"effectfence/result_not_kept":{"sha256":"`+strings.Repeat("ab", 32)+`"}}`)); err != nil {
		t.Fatal(err)
	}
	if rep, err := ledger.Verify(ctx, st); err != nil || !rep.OK() || rep.Verified != 2 {
		t.Fatalf("a ledger with a keep-result hash record: %+v %v", rep, err)
	}
	// The object with more in it was read as the digest alone (Cert.Verify, and the recipe's
	// verifier), and fence_prepare's replay gives it to the agent as the cert's result.
	var digest string
	edit(t, st, "k", func(r *fence.Record) {
		digest, _ = r.Cert.ResultNotKept()
		r.Cert.Result = []byte(`{"effectfence/result_not_kept":{"sha256":"` + digest + `","text":"refund sent"}}`)
	})
	rep, err := ledger.Verify(ctx, st)
	if err != nil || rep.OK() || !strings.Contains(rep.Problems[0].What, `its result {"effectfence/result_not_kept":{"sha256":"`+digest+`","text":"refund sent"}} is not the object of keep-result hash as effectfence writes it`) {
		t.Fatalf("a keep-result hash record whose cert holds more than the digest: %+v %v", rep, err)
	}
	edit(t, st, "k", func(r *fence.Record) { r.Cert.Result = []byte(`{"ok":true}`) })
	rep, err = ledger.Verify(ctx, st)
	if err != nil || rep.OK() || !strings.Contains(rep.Problems[0].What, "keeps only its result's digest (keep_result hash), but its cert holds a result") {
		t.Fatalf("a keep-result hash record whose cert holds the result: %+v %v", rep, err)
	}
}

func TestVerifyParentLinks(t *testing.T) {
	st := fence.NewMemoryStore()
	eng := fence.New(st, fence.Config{})
	committed(t, eng, fence.Request{Intent: "gone-parent", Tool: "t", Parent: strings.Repeat("0", 64)})
	committed(t, eng, fence.Request{Intent: "self", Tool: "t"})
	// A cert cannot name its own hash honestly (the hash covers the parent); an edited one can.
	edit(t, st, "self", func(r *fence.Record) { r.Parent, r.Cert.Parent = r.Cert.Hash, r.Cert.Hash })
	rep, err := ledger.Verify(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Unresolved) != 1 || rep.Unresolved[0].Intent != "gone-parent" {
		t.Errorf("unresolved = %+v", rep.Unresolved)
	}
	var whats []string
	for _, p := range rep.Problems {
		if p.Intent != "self" {
			t.Errorf("problem on %s: %s", p.Intent, p.What)
		}
		whats = append(whats, p.What)
	}
	if !strings.Contains(strings.Join(whats, "|"), "names itself as its parent") {
		t.Errorf("problems %q lack the self-parent", whats)
	}
}

func TestExportAndList(t *testing.T) {
	st := fence.NewMemoryStore()
	eng := fence.New(st, fence.Config{})
	committed(t, eng, fence.Request{Intent: "a", Tool: "t"})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "b", Tool: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Abort(ctx, *adm.Ticket, "timeout"); err != nil {
		t.Fatal(err)
	}
	fenced, _ := ledger.ParseState("fenced")
	recs, err := ledger.List(ctx, st, fenced)
	if err != nil || len(recs) != 1 || recs[0].Intent != "b" {
		t.Fatalf("list fenced = %+v %v", recs, err)
	}
	var buf bytes.Buffer
	n, err := ledger.Export(ctx, st, &buf)
	if err != nil || n != 3 {
		t.Fatalf("export = %d %v", n, err)
	}
	var kinds []string
	for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		var l ledger.ExportLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		switch {
		case l.Record != nil:
			kinds = append(kinds, "record:"+l.Record.Intent)
		case l.Event != nil:
			kinds = append(kinds, "event:"+l.Event.Kind)
		}
	}
	if strings.Join(kinds, ",") != "record:a,record:b,event:abort" {
		t.Fatalf("export lines %v", kinds)
	}
	if _, err := ledger.ParseState("bogus"); err == nil {
		t.Fatal("bogus state accepted")
	}
	if op := ledger.Operator(); !strings.Contains(op, "@") {
		t.Fatalf("operator %q", op)
	}
}

// TestVerifySupersededRecords: done records moved aside by a later action of their intent
// (fence.Request.ReplayWindow) keep certs naming the intent, under SupersededIntent or, when
// that name was held, a numbered name after it; verify accepts both, and still reports a record
// whose cert names an intent it was not superseded from.
func TestVerifySupersededRecords(t *testing.T) {
	st := fence.NewMemoryStore()
	eng := fence.New(st, fence.Config{})
	r := fence.Request{Intent: "order:1", Tool: "t", Args: []byte(`1`)}
	c := committed(t, eng, r)
	committed(t, eng, fence.Request{Intent: fence.SupersededIntent(r.Intent, c.Hash), Tool: "other", Args: []byte(`2`)})
	r.ReplayWindow = time.Nanosecond
	time.Sleep(5 * time.Millisecond)
	committed(t, eng, r) // supersedes the first: its name is held, so it goes to "~2"
	moved := fence.SupersededIntent(r.Intent, c.Hash) + "~2"
	if rec, err := eng.Status(ctx, moved); err != nil || rec.Cert == nil || rec.Cert.Hash != c.Hash {
		t.Fatalf("%s = %+v, %v", moved, rec, err)
	}
	rep, err := ledger.Verify(ctx, st)
	if err != nil || !rep.OK() || rep.Certs != 3 || rep.Verified != 3 {
		t.Fatalf("ledger with superseded records: %+v %v", rep, err)
	}
	edit(t, st, moved, func(rec *fence.Record) { rec.Intent = "order:1~elsewhere" })
	rep, err = ledger.Verify(ctx, st)
	if err != nil || rep.OK() || !strings.Contains(rep.Problems[0].What, `intent "order:1"`) {
		t.Fatalf("a record under a name it was not superseded to: %+v %v", rep, err)
	}
}

// rerunStore runs each read transaction's function a second time after the first, as the
// PostgreSQL store runs a transaction again whose connection it found dead.
type rerunStore struct{ fence.Store }

func (s rerunStore) View(ctx context.Context, fn func(fence.Tx) error) error {
	if err := s.Store.View(ctx, fn); err != nil {
		return err
	}
	return s.Store.View(ctx, fn)
}

// TestWalkPassesSeeTheSameRecordsOnce: Walk's passes each read every record in the states
// asked for, in intent order, and a read transaction run again after records were given to a
// pass fails the walk instead of giving them again (what a pass wrote cannot be taken back).
func TestWalkPassesSeeTheSameRecordsOnce(t *testing.T) {
	st := fence.NewMemoryStore()
	eng := fence.New(st, fence.Config{})
	for _, id := range []string{"c", "a", "b"} {
		committed(t, eng, fence.Request{Intent: id, Tool: "t", Args: []byte(`{}`)})
	}
	if _, err := eng.Prepare(ctx, fence.Request{Intent: "held", Tool: "t", Args: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	var seen [2][]string
	var ends int
	pass := func(i int) ledger.Pass {
		return ledger.Pass{
			Record: func(r *fence.Record) error { seen[i] = append(seen[i], r.Intent); return nil },
			End:    func(unreadable error) error { ends++; return unreadable },
		}
	}
	if err := ledger.Walk(ctx, st, []fence.State{fence.StateDone}, pass(0), pass(1)); err != nil {
		t.Fatal(err)
	}
	for i, got := range seen {
		if strings.Join(got, " ") != "a b c" {
			t.Errorf("pass %d read %q", i, got)
		}
	}
	if ends != 2 {
		t.Errorf("%d ends, want 2", ends)
	}
	seen = [2][]string{}
	err := ledger.Walk(ctx, rerunStore{st}, nil, pass(0))
	if err == nil || !strings.Contains(err.Error(), "ran the read again") || len(seen[0]) != 4 {
		t.Fatalf("a read run again: %v, records given %q", err, seen[0])
	}
}
