package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestFrozenCommitPastTheLease: the holder's connection freezes during its commit (netcut:
// every byte held, nothing closed) until its lease has lapsed. A commit the server had not
// begun lets another process take the claim over (it was declared re-run safe and its holder
// is out of sight) and record its own outcome; the holder's commit, thawed, must not
// overwrite it: it is refused lease_lost, its result kept in the audit trail as a late
// result. A commit frozen while its transaction holds the intent's lock keeps the claim:
// the other process waits for the lock, and then replays the holder's outcome.
func TestFrozenCommitPastTheLease(t *testing.T) {
	const lease = 300 * time.Millisecond
	schema := testSchema(t)
	p, err := netcut.NewPostgres(pgHost(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	ctx := context.Background()
	held := openThrough(t, p, schema)
	direct := openSchema(t, schema)
	// The holder is out of the other's sight (another host, as far as it can tell).
	holder := fence.New(held, fence.Config{LeaseTTL: lease, Owner: "host-h:1:boot"})
	other := fence.New(direct, fence.Config{LeaseTTL: time.Minute, Liveness: func(string) fence.Liveness { return fence.CannotTell }})

	for i, c := range []struct {
		name     string
		tx       bool // the commit is a transaction, not one statement
		afterRT1 bool // frozen once the transaction holds the intent's lock
	}{
		{"one statement, frozen before it is sent", false, false},
		{"transaction, frozen before it is sent", true, false},
		{"transaction, frozen holding the intent's lock", true, true},
	} {
		r := fence.Request{Intent: fmt.Sprintf("frozen:%d", i), Tool: "charge", Args: []byte(`{"usd":1}`), RerunSafe: true}
		adm, err := holder.Prepare(ctx, r)
		if err != nil || !adm.Fresh() {
			t.Fatalf("%s: claim: %+v %v", c.name, adm, err)
		}
		held.noSpeculation.Store(c.tx)
		if c.afterRT1 {
			held.hook = func(stage string, _ uint32) {
				if stage == "begin" {
					p.Freeze()
				}
			}
		} else {
			p.Freeze()
		}
		type answer struct {
			cert *fence.Cert
			err  error
		}
		committed := make(chan answer, 1)
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			cert, err := holder.Commit(cctx, *adm.Ticket, []byte(`{"by":"holder"}`))
			committed <- answer{cert, err}
		}()
		time.Sleep(lease + 100*time.Millisecond) // frozen past the lease
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		taken := make(chan answer, 1)
		go func() {
			oadm, err := other.Prepare(octx, r)
			if err == nil && oadm.Fresh() {
				var cert *fence.Cert
				cert, err = other.Commit(octx, *oadm.Ticket, []byte(`{"by":"other"}`))
				taken <- answer{cert, err}
				return
			}
			taken <- answer{oadm.Cert, err}
		}()
		if c.afterRT1 {
			// The other waits for the intent's lock, which the frozen transaction holds.
			select {
			case a := <-taken:
				t.Fatalf("%s: the other was answered while the holder's transaction held the lock: %+v", c.name, a)
			case <-time.After(300 * time.Millisecond):
			}
		}
		var o answer
		if !c.afterRT1 {
			o = <-taken // the takeover's outcome is recorded before the holder thaws
		}
		p.Heal()
		h := <-committed
		if c.afterRT1 {
			o = <-taken
		}
		cancel()
		held.hook = nil
		held.noSpeculation.Store(false)
		st, err := other.Status(ctx, r.Intent)
		if err != nil {
			t.Fatal(err)
		}
		late := 0
		if err := direct.View(ctx, func(tx fence.Tx) error {
			return tx.Events(r.Intent, func(ev fence.Event) bool {
				if ev.Kind == fence.EventLateResult {
					late++
				}
				return true
			})
		}); err != nil {
			t.Fatal(err)
		}
		if c.afterRT1 {
			// The holder's commit stands; the other replays it.
			if h.err != nil || o.err != nil || o.cert == nil || o.cert.Hash != h.cert.Hash || string(st.Cert.Result) != `{"by":"holder"}` {
				t.Fatalf("%s: holder %+v, other %+v, record %s %s", c.name, h, o, st.State, certResult(st.Cert))
			}
			continue
		}
		if o.err != nil || o.cert == nil {
			t.Fatalf("%s: the takeover after the lease lapsed: %+v", c.name, o)
		}
		if !errors.Is(h.err, fence.ErrLeaseLost) {
			t.Fatalf("%s: the holder's thawed commit answered %+v, want lease_lost", c.name, h)
		}
		if st.State != fence.StateDone || st.Cert.Hash != o.cert.Hash || string(st.Cert.Result) != `{"by":"other"}` || late != 1 {
			t.Fatalf("%s: record %s %s, %d late results; want the takeover's outcome and the holder's late result", c.name, st.State, certResult(st.Cert), late)
		}
	}
}

func certResult(c *fence.Cert) string {
	if c == nil {
		return "(no cert)"
	}
	return string(c.Result)
}
