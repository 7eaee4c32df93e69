package fence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// checkTable compares the records table with the plain map it must equal, and checks the
// table's own counts: live and used match its slots, and it is never over three quarters full.
func checkTable(t *testing.T, step int, tab *recTable, want map[string]*Record, absent []string) {
	t.Helper()
	live, used := 0, 0
	for _, s := range tab.slots {
		if s.rec != nil {
			live++
		}
		if s.rec != nil || s.hash == tombstone {
			used++
		}
	}
	if live != tab.live || used != tab.used || live != len(want) {
		t.Fatalf("step %d: %d live slots (counted %d), %d used (counted %d); the map holds %d", step, live, tab.live, used, tab.used, len(want))
	}
	if len(tab.slots) > 0 && used*4 > len(tab.slots)*3 {
		t.Fatalf("step %d: %d of %d slots used", step, used, len(tab.slots))
	}
	for k, rec := range want {
		if got := tab.get(k); got != rec {
			t.Fatalf("step %d: get(%q) = %p, want %p", step, k, got, rec)
		}
	}
	for _, k := range absent {
		if _, ok := want[k]; !ok && tab.get(k) != nil {
			t.Fatalf("step %d: get(%q) found a record the map does not hold", step, k)
		}
	}
	seen := 0
	tab.each(func(rec *Record) bool {
		if want[rec.Intent] != rec {
			t.Fatalf("step %d: each gave %q, which the map does not hold", step, rec.Intent)
		}
		seen++
		return true
	})
	if seen != len(want) {
		t.Fatalf("step %d: each gave %d records, the map holds %d", step, seen, len(want))
	}
}

// TestRecTableMatchesAMap: random inserts, overwrites and deletes of keys from a small set (so
// that the table grows, fills with tombstones, reuses them and rehashes), checked after every
// step against a plain map.
func TestRecTableMatchesAMap(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 16))
		var tab recTable
		want := map[string]*Record{}
		keys := make([]string, 40+rng.IntN(400))
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i)
		}
		for step := 0; step < 6000; step++ {
			k := keys[rng.IntN(len(keys))]
			switch op := rng.IntN(10); {
			case op < 5: // insert or overwrite, the store's way: a find, then a set at its probe
				rec := &Record{Intent: k}
				prev, p := tab.find(k)
				if prev != want[k] {
					t.Fatalf("seed %d step %d: find(%q) = %p, want %p", seed, step, k, prev, want[k])
				}
				tab.set(rec, prev != nil, p)
				want[k] = rec
			case op < 6: // the undo's way
				rec := &Record{Intent: k}
				tab.put(rec)
				want[k] = rec
			default:
				if got := tab.remove(k); got != want[k] {
					t.Fatalf("seed %d step %d: remove(%q) = %p, want %p", seed, step, k, got, want[k])
				}
				delete(want, k)
			}
			if step%7 == 0 || step > 5900 {
				checkTable(t, step, &tab, want, keys)
			}
		}
		for k := range want { // empty it: every slot becomes free again
			tab.remove(k)
			delete(want, k)
		}
		checkTable(t, -1, &tab, want, keys)
	}
}

// TestMemoryStoreMatchesAMap drives the store through transactions of random Gets, Puts and
// Deletes, a third of which fail and must leave no trace, and checks Get, ordered Scan and
// CertByHash against a plain map after each.
func TestMemoryStoreMatchesAMap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	errPlanned := errors.New("planned failure")
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 41))
		st := NewMemoryStore()
		want := map[string]*Record{}
		keys := make([]string, 20+rng.IntN(300))
		for i := range keys {
			keys[i] = "intent:" + strconv.Itoa(i)
		}
		n := 0
		for round := 0; round < 800; round++ {
			next := maps.Clone(want)
			fail := rng.IntN(3) == 0
			err := st.Update(ctx, func(tx Tx) error {
				for range 1 + rng.IntN(12) {
					k := keys[rng.IntN(len(keys))]
					switch op := rng.IntN(8); {
					case op < 2:
						got, err := tx.Get(k)
						if err != nil || got != next[k] {
							t.Fatalf("seed %d round %d: Get(%q) = %p, %v; want %p", seed, round, k, got, err, next[k])
						}
					case op < 3: // a Put right after the Get of its intent (the engine's way)
						if _, err := tx.Get(k); err != nil {
							return err
						}
						fallthrough
					case op < 6:
						n++
						rec := &Record{Intent: k, State: StateDone, Cert: &Cert{Hash: "h" + strconv.Itoa(n)}}
						if err := tx.Put(rec); err != nil {
							return err
						}
						next[k] = rec
					default:
						if err := tx.Delete(k); err != nil {
							return err
						}
						delete(next, k)
					}
				}
				if fail {
					return errPlanned
				}
				return nil
			})
			if fail != (err != nil) {
				t.Fatalf("seed %d round %d: Update = %v", seed, round, err)
			}
			if !fail {
				want = next
			}
			checkTable(t, round, &st.records, want, keys)
			err = st.View(ctx, func(tx Tx) error {
				var got []string
				if err := tx.Scan(Filter{}, func(r *Record) bool { got = append(got, r.Intent); return true }); err != nil {
					return err
				}
				wantKeys := make([]string, 0, len(want))
				for k := range want {
					wantKeys = append(wantKeys, k)
				}
				slices.Sort(wantKeys)
				if !slices.Equal(got, wantKeys) {
					t.Fatalf("seed %d round %d: Scan gave %q, want %q", seed, round, got, wantKeys)
				}
				for _, k := range wantKeys[:min(3, len(wantKeys))] {
					if rec, err := tx.CertByHash(want[k].Cert.Hash); err != nil || rec != want[k] {
						t.Fatalf("seed %d round %d: CertByHash of %q's cert = %p, %v", seed, round, k, rec, err)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestZeroMemoryStoreRecords: a MemoryStore not made by a constructor reads as empty and takes
// records (its table makes its seed at the first insertion).
func TestZeroMemoryStoreRecords(t *testing.T) {
	var tab recTable
	if tab.get("x") != nil || tab.remove("x") != nil {
		t.Fatal("an empty table holds x")
	}
	rec, p := tab.find("x")
	if rec != nil {
		t.Fatal("an empty table found x")
	}
	tab.set(&Record{Intent: "x"}, false, p)
	if got := tab.get("x"); got == nil || got.Intent != "x" {
		t.Fatalf("get(x) = %v after set", got)
	}
}

// TestZeroMemoryStoreDecides: a MemoryStore not made by a constructor is an empty store on the
// wall clock, as NewMemoryStore's: an engine on it admits, commits, replays and reserves domain
// numbers (its Update and View panicked on the missing clock and domain map).
func TestZeroMemoryStoreDecides(t *testing.T) {
	ctx := context.Background()
	for _, first := range []string{"view", "update"} {
		st := &MemoryStore{}
		e := New(st, Config{})
		r := Request{Intent: "zero:1", Tool: "charge", Args: json.RawMessage(`{"usd":1}`), Domain: "acct:1"}
		if first == "view" {
			if rec, err := e.Status(ctx, r.Intent); err != nil || rec.State != StateNone {
				t.Fatalf("status on an empty store: %+v %v", rec, err)
			}
		}
		adm, err := e.Prepare(ctx, r)
		if err != nil || !adm.Fresh() || adm.Ticket.Seq != 1 {
			t.Fatalf("%s first: prepare = %+v, %v", first, adm, err)
		}
		cert, err := e.Commit(ctx, *adm.Ticket, json.RawMessage(`"ok"`))
		if err != nil {
			t.Fatal(err)
		}
		again, err := e.Prepare(ctx, r)
		if err != nil || again.Fresh() || again.Cert.Hash != cert.Hash {
			t.Fatalf("%s first: duplicate = %+v, %v", first, again, err)
		}
		if seq, err := e.Current(ctx, "acct:1"); err != nil || seq != 1 {
			t.Fatalf("%s first: acct:1 at %d, %v", first, seq, err)
		}
		e.Close()
	}
}

// TestRecTableFullHashCollision: two intents whose 64-bit hashes are equal are told apart by
// the intents themselves. The table cannot be made to hash two intents alike, so a record of
// intent "b" is stored under the hash of "a" (where an insertion of "a" would go) before "a"
// is looked up, inserted, removed and looked up again, in a table past its first size (where
// get probes) and in one of the first size (where get compares intents).
func TestRecTableFullHashCollision(t *testing.T) {
	for _, fillers := range []int{0, 10} {
		var tab recTable
		want := map[string]*Record{}
		for i := range fillers {
			rec := &Record{Intent: "filler" + strconv.Itoa(i)}
			tab.put(rec)
			want[rec.Intent] = rec
		}
		_, p := tab.find("a")
		if p.slot < 0 { // an empty table: give it its slots and seed first
			tmp := &Record{Intent: "tmp"}
			tab.put(tmp)
			tab.remove("tmp")
			_, p = tab.find("a")
		}
		b := &Record{Intent: "b"}
		tab.set(b, false, p) // b, stored with a's hash
		if got, _ := tab.find("a"); got != nil {
			t.Fatalf("%d fillers: find(a) = %q, which only shares a's hash", fillers, got.Intent)
		}
		if got := tab.get("a"); got != nil {
			t.Fatalf("%d fillers: get(a) = %q, which only shares a's hash", fillers, got.Intent)
		}
		a := &Record{Intent: "a"}
		got, p := tab.find("a")
		tab.set(a, got != nil, p)
		if got, _ := tab.find("a"); got != a {
			t.Fatalf("%d fillers: find(a) = %v after inserting a", fillers, got)
		}
		if got := tab.get("a"); got != a {
			t.Fatalf("%d fillers: get(a) = %v after inserting a", fillers, got)
		}
		if got := tab.remove("a"); got != a {
			t.Fatalf("%d fillers: remove(a) = %v", fillers, got)
		}
		if got := tab.get("a"); got != nil {
			t.Fatalf("%d fillers: get(a) = %q after removing a", fillers, got.Intent)
		}
		seenB := false
		tab.each(func(r *Record) bool { seenB = seenB || r == b; return true })
		if !seenB || tab.live != len(want)+1 {
			t.Fatalf("%d fillers: b kept %v, %d live; want b and %d", fillers, seenB, tab.live, len(want)+1)
		}
	}
}

// TestMemoryStoreWritesDuringScanMatchAMap drives the store through transactions whose Scan
// callbacks write: they delete records the scan has yet to reach, the one it is on, and others,
// and insert enough to grow the table while the scan runs. A quarter of the transactions fail
// with an error and an eighth panic; either must leave no trace. Readers run Views all along.
// Checked: a scan yields records in intent order, each the record its intent held when the
// scan began or holds now (never nil, never one its filter refuses), and after every
// transaction the table equals a plain map.
func TestMemoryStoreWritesDuringScanMatchAMap(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		writesDuringScan(t, seed)
	}
}

// writesDuringScan is one seed's run of TestMemoryStoreWritesDuringScanMatchAMap.
func writesDuringScan(t *testing.T, seed uint64) {
	ctx := context.Background()
	errPlanned := errors.New("planned failure")
	states := []State{StateInFlight, StateDone, StateFailed, StateUnknown}
	rng := rand.New(rand.NewPCG(seed, 77))
	st := NewMemoryStore()
	want := map[string]*Record{}
	keys := make([]string, 30+rng.IntN(200))
	for i := range keys {
		keys[i] = "intent:" + strconv.Itoa(i)
	}
	newRec := func(k string) *Record { return &Record{Intent: k, State: states[rng.IntN(len(states))]} }

	stop := make(chan struct{})
	readers := make(chan error, 2)
	stopped := false
	defer func() { // a failed check ends the test: stop the readers too
		if !stopped {
			close(stop)
		}
	}()
	for r := range 2 {
		go func() {
			var err error
			for n := 0; err == nil; n++ {
				select {
				case <-stop:
					readers <- nil
					return
				default:
				}
				err = st.View(ctx, func(tx Tx) error {
					prev := ""
					var bad error
					_ = tx.Scan(Filter{}, func(rec *Record) bool {
						if rec == nil || rec.Intent <= prev {
							bad = errors.New("a View's scan gave nil or went out of order")
							return false
						}
						if got, _ := tx.Get(rec.Intent); got != rec {
							bad = errors.New("a View's Get disagreed with its Scan")
							return false
						}
						prev = rec.Intent
						return n%3 != r
					})
					return bad
				})
			}
			readers <- err
		}()
	}

	for round := 0; round < 400; round++ {
		next := maps.Clone(want)
		fail := rng.IntN(8)
		var scanErr error
		func() {
			defer func() {
				if r := recover(); r != nil && r != errPlanned {
					panic(r)
				}
			}()
			err := st.Update(ctx, func(tx Tx) error {
				for range 1 + rng.IntN(6) {
					k := keys[rng.IntN(len(keys))]
					switch op := rng.IntN(6); {
					case op < 2:
						rec := newRec(k)
						if err := tx.Put(rec); err != nil {
							return err
						}
						next[k] = rec
					case op < 3:
						if err := tx.Delete(k); err != nil {
							return err
						}
						delete(next, k)
					default: // a scan that writes
						f := Filter{Limit: rng.IntN(3) * 10}
						if rng.IntN(2) == 0 {
							f.States = states[:1+rng.IntN(2)]
						}
						if rng.IntN(3) == 0 {
							f.After = keys[rng.IntN(len(keys))]
						}
						snap := maps.Clone(next)
						prev := ""
						err := tx.Scan(f, func(rec *Record) bool {
							if rec == nil || rec.Intent <= prev || !f.Match(rec) || (rec != snap[rec.Intent] && rec != next[rec.Intent]) {
								scanErr = fmt.Errorf("round %d: scan gave %+v after %q, filter %+v", round, rec, prev, f)
								return false
							}
							prev = rec.Intent
							for range rng.IntN(4) {
								w := keys[rng.IntN(len(keys))]
								switch rng.IntN(4) {
								case 0: // the record the scan is on
									w = rec.Intent
									fallthrough
								case 1:
									_ = tx.Delete(w)
									delete(next, w)
								default:
									nr := newRec(w)
									_ = tx.Put(nr)
									next[w] = nr
								}
							}
							return rng.IntN(10) != 0
						})
						if err != nil {
							return err
						}
					}
				}
				switch fail {
				case 0, 1:
					return errPlanned
				case 2:
					panic(errPlanned)
				}
				return nil
			})
			if (fail <= 1) != (err != nil) {
				t.Fatalf("seed %d round %d: Update = %v", seed, round, err)
			}
		}()
		if scanErr != nil {
			t.Fatalf("seed %d: %v", seed, scanErr)
		}
		if fail > 2 {
			want = next
		}
		checkTable(t, round, &st.records, want, keys)
	}
	close(stop)
	stopped = true
	for range 2 {
		if err := <-readers; err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}
