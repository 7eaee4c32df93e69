package fence

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestRetriedCommitAfterAClearSaysWhetherItLanded: a commit retried because its earlier
// attempt failed with the ledger's error (it may have landed, its answer lost) by another
// process than the one that sent it (a spool drained elsewhere, its first process killed)
// finds the intent cleared by an operator meanwhile. That process's store knows nothing of
// the earlier attempt (the memory store keeps no doubts), and the refusal said "the intent's
// record is unchanged" whether or not the commit had been recorded. The clear's event names
// the claim it ended and the state its record had: done, the refusal and its late result say
// the earlier attempt was recorded; in flight, that the record is unchanged, as it is. A
// trail whose clear names no claim (written before clears named one) cannot tell, and says
// so. A commit that is no retry says the record is unchanged, as a second commit always did.
func TestRetriedCommitAfterAClearSaysWhetherItLanded(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		landed bool // the earlier attempt was recorded before the clear
		old    bool // the clear's event names no claim, as before 2026-12-07
		retry  bool
		want   string
	}{
		{"landed", true, false, true, "an earlier attempt of this report, whose answer was lost, was recorded before the record changed"},
		{"not landed", false, false, true, "the intent's record is unchanged"},
		{"landed, trail without the claim", true, true, true, "may have been recorded before the record changed (the ledger cannot tell)"},
		{"not landed, trail without the claim", false, true, true, "may have been recorded before the record changed (the ledger cannot tell)"},
		{"landed, no retry", true, false, false, "the intent's record is unchanged"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := NewMemoryStore()
			first := New(st, Config{Owner: "first"})
			r := Request{Intent: "charge:cleared", Tool: "charge", Args: json.RawMessage(`{"usd":1}`)}
			adm, err := first.Prepare(ctx, r)
			if err != nil || !adm.Fresh() {
				t.Fatal(adm, err)
			}
			o := Outcome{Kind: OutcomeCommit, Ticket: *adm.Ticket, Result: json.RawMessage(`"charged"`)}
			if c.landed {
				if _, err := first.apply(ctx, o, false); err != nil { // its answer, say, lost
					t.Fatal(err)
				}
			}
			if c.old {
				if err := st.Update(ctx, func(tx Tx) error {
					rec, err := tx.Get(r.Intent)
					if err != nil {
						return err
					}
					if err := tx.Delete(r.Intent); err != nil {
						return err
					}
					return tx.AppendEvent(Event{At: tx.Now(), Intent: r.Intent, Kind: EventClear, Who: "ops", Reason: "checked by hand", State: rec.State})
				}); err != nil {
					t.Fatal(err)
				}
			} else if _, err := New(st, Config{Owner: "operator"}).Clear(ctx, r.Intent, "ops", "checked by hand"); err != nil {
				t.Fatal(err)
			}
			_, err = New(st, Config{Owner: "second"}).apply(ctx, o, c.retry)
			if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("the commit after the clear: %v; want lease_lost saying %q", err, c.want)
			}
			var late []string
			if err := st.View(ctx, func(tx Tx) error {
				return tx.Events(r.Intent, func(ev Event) bool {
					if ev.Kind == EventLateResult {
						late = append(late, ev.Reason)
					}
					return true
				})
			}); err != nil {
				t.Fatal(err)
			}
			if len(late) != 1 || !strings.Contains(late[0], c.want) {
				t.Errorf("late results %q; want one saying %q", late, c.want)
			}
		})
	}
}

// doubtingStore is a store whose transactions doubt every earlier attempt (EarlierAttempt:
// it may have landed), as the PostgreSQL store's do of a COMMIT whose answer was lost and
// that txid_status could not settle.
type doubtingStore struct{ Store }

func (d doubtingStore) Update(ctx context.Context, fn func(Tx) error) error {
	return d.Store.Update(ctx, func(tx Tx) error { return fn(doubtingTx{tx}) })
}

type doubtingTx struct{ Tx }

func (doubtingTx) EarlierAttempt(string, uint64, string) (bool, bool) { return false, true }

// TestStoreDoubtGivesWayToTheTrail: a retried commit whose store cannot tell whether its
// earlier attempt landed (EarlierAttempt: maybe) is told what the event that ended its claim
// says, when that event names the claim: done when cleared, it was recorded; in flight, the
// record is unchanged. Before 2026-12-07 the store's doubt was the answer ("the ledger cannot
// tell") though the trail could tell.
func TestStoreDoubtGivesWayToTheTrail(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		landed bool
		want   string
	}{
		{"landed", true, "an earlier attempt of this report, whose answer was lost, was recorded before the record changed"},
		{"not landed", false, "the intent's record is unchanged"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := doubtingStore{NewMemoryStore()}
			first := New(st, Config{Owner: "first"})
			r := Request{Intent: "charge:doubted", Tool: "charge", Args: json.RawMessage(`{"usd":1}`)}
			adm, err := first.Prepare(ctx, r)
			if err != nil || !adm.Fresh() {
				t.Fatal(adm, err)
			}
			o := Outcome{Kind: OutcomeCommit, Ticket: *adm.Ticket, Result: json.RawMessage(`"charged"`)}
			if c.landed {
				if _, err := first.apply(ctx, o, false); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := New(st, Config{Owner: "operator"}).Clear(ctx, r.Intent, "ops", "checked by hand"); err != nil {
				t.Fatal(err)
			}
			_, err = first.apply(ctx, o, true)
			if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "cannot tell") {
				t.Fatalf("the retried commit after the clear: %v; want lease_lost saying %q", err, c.want)
			}
		})
	}
}
