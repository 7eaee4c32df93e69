package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// scanRecords are records in every state, with and without an expiry (past or future) and a
// cert, in a known order: what TestScanFiltersMatch scans.
func scanRecords(base time.Time) []*fence.Record {
	states := []fence.State{fence.StateInFlight, fence.StateDone, fence.StateFailed, fence.StateUnknown, fence.StateDone}
	var recs []*fence.Record
	for i := range 47 {
		r := &fence.Record{Intent: fmt.Sprintf("r:%03d", i), State: states[i%len(states)], Tool: "t", Args: []byte(`{}`),
			UpdatedAt: base}
		switch i % 3 {
		case 1:
			r.ExpiresAt = base.Add(-time.Hour)
		case 2:
			r.ExpiresAt = base.Add(time.Hour)
		}
		if r.State == fence.StateDone {
			r.Cert = &fence.Cert{Intent: r.Intent, Hash: "h:" + r.Intent}
		}
		recs = append(recs, r)
	}
	return recs
}

// scanURL is the test URL with extra session settings.
func scanURL(t *testing.T, params string) string {
	u := testURL(t)
	if params == "" {
		return u
	}
	if strings.Contains(u, "?") {
		return u + "&" + params
	}
	return u + "?" + params
}

// TestScanFiltersMatch: Scan returns exactly the records fence.Filter.Match selects, in intent
// order, for every combination of states (each subset of the stored ones, and a state nothing
// has), expiry, After and Limit, in a View and in an Update, and a scan paged by After and
// Limit over more records than a page visits each selected record once. It runs with the
// server choosing plans, with generic plans and with custom plans (sequential scans priced
// out, so the indexes are used where they can be), on this build's record indexes and on
// version 1's.
func TestScanFiltersMatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := testSchema(t)
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	recs := scanRecords(base)
	modes := map[string]string{
		"server":  "",
		"generic": "plan_cache_mode=force_generic_plan&enable_seqscan=off&jit=off",
		"custom":  "plan_cache_mode=force_custom_plan&enable_seqscan=off&jit=off",
	}
	stores := map[string]*Store{}
	for name, params := range modes {
		s, err := Open(ctx, Config{URL: scanURL(t, params), Schema: schema, MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		stores[name] = s
		var mode string
		if err := s.pool.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if want, _, _ := strings.Cut(strings.TrimPrefix(params, "plan_cache_mode="), "&"); params != "" && mode != want {
			t.Fatalf("%s plans: plan_cache_mode is %s", name, mode)
		}
	}
	err := stores["server"].Update(ctx, func(tx fence.Tx) error {
		for _, r := range recs {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var filters []fence.Filter
	all := []fence.State{fence.StateInFlight, fence.StateDone, fence.StateFailed, fence.StateUnknown}
	var stateSets [][]fence.State
	for mask := range 1 << len(all) {
		var set []fence.State
		for i, s := range all {
			if mask&(1<<i) != 0 {
				set = append(set, s)
			}
		}
		stateSets = append(stateSets, set)
	}
	stateSets = append(stateSets, []fence.State{fence.StateNone}, []fence.State{fence.StateNone, fence.StateFailed})
	for _, states := range stateSets {
		for _, expires := range []time.Time{{}, base} {
			for _, after := range []string{"", "r:017", "r:999"} {
				for _, limit := range []int{0, 1, 4, 100} {
					filters = append(filters, fence.Filter{States: states, ExpiresBefore: expires, After: after, Limit: limit})
				}
			}
		}
	}
	want := func(f fence.Filter) []string {
		var out []string
		for _, r := range recs {
			if f.Match(r) && (f.Limit <= 0 || len(out) < f.Limit) {
				out = append(out, r.Intent)
			}
		}
		return out
	}
	scan := func(s *Store, write bool, f fence.Filter) ([]string, error) {
		var got []string
		run := s.View
		if write {
			run = s.Update
		}
		err := run(ctx, func(tx fence.Tx) error {
			got = got[:0]
			return tx.Scan(f, func(r *fence.Record) bool {
				got = append(got, r.Intent+"="+string(r.State))
				return true
			})
		})
		for i, g := range got {
			got[i], _, _ = strings.Cut(g, "=")
		}
		return got, err
	}
	stateOf := map[string]fence.State{}
	for _, r := range recs {
		stateOf[r.Intent] = r.State
	}
	check := func(layout string) {
		for name, s := range stores {
			for _, f := range filters {
				got, err := scan(s, false, f)
				if err != nil {
					t.Fatalf("%s, %s plans: scan %+v: %v", layout, name, f, err)
				}
				if w := want(f); !slices.Equal(got, w) {
					t.Errorf("%s, %s plans: scan %+v:\n got %v\nwant %v", layout, name, f, got, w)
				}
			}
			// Paging: each page resumes after the last intent of the one before.
			for _, states := range stateSets {
				for _, page := range []int{1, 3, 4} {
					f := fence.Filter{States: states, Limit: page}
					var got []string
					for pages := 0; ; pages++ {
						p, err := scan(s, false, f)
						if err != nil {
							t.Fatal(err)
						}
						got = append(got, p...)
						if len(p) < page || pages > len(recs) {
							break
						}
						f.After = p[len(p)-1]
					}
					if w := want(fence.Filter{States: states}); !slices.Equal(got, w) {
						t.Errorf("%s, %s plans: %v in pages of %d:\n got %v\nwant %v", layout, name, states, page, got, w)
					}
				}
			}
		}
		// In an Update each record is read again under its lock before fn sees it.
		for _, states := range stateSets {
			for _, expires := range []time.Time{{}, base} {
				f := fence.Filter{States: states, ExpiresBefore: expires, Limit: 5}
				got, err := scan(stores["generic"], true, f)
				if err != nil {
					t.Fatal(err)
				}
				if w := want(f); !slices.Equal(got, w) {
					t.Errorf("%s, update: scan %+v:\n got %v\nwant %v", layout, f, got, w)
				}
			}
		}
	}
	check("this build's indexes")
	conn := admin(t, schema)
	if _, err := conn.Exec(ctx, version1Indexes); err != nil {
		t.Fatal(err)
	}
	check("version 1's indexes")
}

// TestCertByHashFindsTheDoneRecord: CertByHash answers with a done record carrying the hash,
// also when a record that is not done carries it too, and with none when only records that
// are not done carry it.
func TestCertByHashFindsTheDoneRecord(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t)
	rec := func(intent string, state fence.State, hash string) *fence.Record {
		return &fence.Record{Intent: intent, State: state, Tool: "t", Args: []byte(`{}`), Cert: &fence.Cert{Intent: intent, Hash: hash}}
	}
	err := s.Update(ctx, func(tx fence.Tx) error {
		for _, r := range []*fence.Record{
			rec("a:unknown", fence.StateUnknown, "shared"), // sorts before the done record
			rec("b:done", fence.StateDone, "shared"),
			rec("c:failed", fence.StateFailed, "shared"),
			rec("d:done", fence.StateDone, "twice"),
			rec("e:done", fence.StateDone, "twice"),
			rec("f:inflight", fence.StateInFlight, "open-only"),
			rec("g:failed", fence.StateFailed, "open-only"),
		} {
			if err := tx.Put(r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, write := range []bool{false, true} {
		run := s.View
		if write {
			run = s.Update
		}
		for hash, want := range map[string][]string{"shared": {"b:done"}, "twice": {"d:done", "e:done"}, "open-only": nil, "absent": nil} {
			var got *fence.Record
			err := run(ctx, func(tx fence.Tx) error {
				var err error
				got, err = tx.CertByHash(hash)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case want == nil && got != nil:
				t.Errorf("CertByHash(%q) (write %v) = %s (%s), want none", hash, write, got.Intent, got.State)
			case want != nil && got == nil:
				t.Errorf("CertByHash(%q) (write %v) = none, want one of %v", hash, write, want)
			case want != nil && (!slices.Contains(want, got.Intent) || got.State != fence.StateDone || got.Cert.Hash != hash):
				t.Errorf("CertByHash(%q) (write %v) = %s (%s), want one of %v", hash, write, got.Intent, got.State, want)
			}
		}
	}
}
