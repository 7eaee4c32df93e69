package fencetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// hostileNames are intents, domains and agent names a caller may pass: control bytes, a NUL,
// quotes and SQL, line separators, bytes that are not UTF-8, and names at and beyond the
// length bounds.
func hostileNames() []string {
	long := func(n int) string {
		// Incompressible text, so a store cannot shrink it below an index's row limit.
		var b strings.Builder
		x := uint32(2463534242)
		for b.Len() < n {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			b.WriteByte(byte('!' + x%90))
		}
		return b.String()[:n]
	}
	return []string{
		"a\x00b", "\x00", "'; DROP TABLE effectfence_records; --", `q"uote\`, "\u2028line\u2029", "tab\tnl\n",
		"\uFFFD", "\U0001F600", "%_", "\xff", "a\xc0\xafb\xed\xa0\x80", long(fence.MaxIntentLen), long(4000),
	}
}

// asText is s as the ledger keeps free text: each byte that is not valid UTF-8 reads back as
// U+FFFD.
func asText(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

// testHostileNames: a name is either refused as invalid by every store (InvalidError,
// nothing written) or kept exactly by every store: admitted, committed and replayed under
// the same name, its domain sequence taken and read back, its agent in the cert. A store must
// never answer with a ledger error for a name the engine accepted, nor for a query or an
// operator's command naming one it refused (no such record: as for any name never used).
// As free text (a reason, who cleared) every name is kept as the ledger keeps text: exactly,
// except that each byte that is not valid UTF-8 reads back as U+FFFD, on every store.
func testHostileNames(t *testing.T, newStore Factory) {
	t.Parallel()
	st := newStore(t)
	eng := fence.New(st, fence.Config{})
	records := func() int {
		n := 0
		if err := st.View(ctx, func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{}, func(*fence.Record) bool { n++; return true })
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i, name := range hostileNames() {
		// The name as each of intent, domain and agent (beside ordinary names), so a name
		// refused in one role is still tried in the others.
		roles := []struct{ role, intent, domain, agent string }{
			{"intent", name, fmt.Sprintf("d%d", i), "a"},
			{"domain", fmt.Sprintf("domain-role:%d", i), name, "a"},
			{"agent", fmt.Sprintf("agent-role:%d", i), fmt.Sprintf("e%d", i), name},
		}
		// As the reason of an abort and the who and why of a clear: kept as text.
		intent, text := fmt.Sprintf("reason-role:%d", i), asText(name)
		if err := eng.Abort(ctx, mustFresh(t, eng, req(intent)), name); err != nil {
			t.Errorf("name %d: abort with it as the reason: %v", i, err)
		} else if s, err := eng.Status(ctx, intent); err != nil || s.State != fence.StateFailed || s.Reason != text {
			t.Errorf("name %d: after abort, status = %s %.20q, %v", i, s.State, s.Reason, err)
		}
		if _, err := eng.Clear(ctx, intent, name, name); err != nil {
			t.Errorf("name %d: clear with it as who and why: %v", i, err)
		}
		var cleared []fence.Event
		if err := st.View(ctx, func(tx fence.Tx) error {
			return tx.Events(intent, func(ev fence.Event) bool {
				if ev.Kind == fence.EventClear {
					cleared = append(cleared, ev)
				}
				return true
			})
		}); err != nil || len(cleared) != 1 || cleared[0].Who != text || cleared[0].Reason != text {
			t.Errorf("name %d: clear event = %+v, %v", i, cleared, err)
		}
		for _, ro := range roles {
			what := fmt.Sprintf("name %d as %s (%d bytes, %.12q)", i, ro.role, len(name), name)
			r := fence.Request{Intent: ro.intent, Tool: "t", Args: []byte(`{"n":1}`), Domain: ro.domain, Agent: ro.agent,
				ReadSet: []fence.ReadSetEntry{{Domain: ro.domain, Seq: 0}}}
			before := records()
			adm, err := eng.Prepare(ctx, r)
			var inv fence.InvalidError
			if errors.As(err, &inv) {
				if n := records(); n != before {
					t.Errorf("%s: refused as invalid, yet the ledger went from %d records to %d", what, before, n)
				}
				// A query about a name the ledger cannot hold answers, as for any other.
				if s, err := eng.Status(ctx, ro.intent); err != nil || s.State != fence.StateNone {
					t.Errorf("%s: refused as invalid; status = %s, %v; want none", what, s.State, err)
				}
				if _, err := eng.Current(ctx, ro.domain); err != nil {
					t.Errorf("%s: refused as invalid; current: %v", what, err)
				}
				if err := eng.EvictDomain(ctx, ro.domain); err != nil {
					t.Errorf("%s: refused as invalid; evict: %v", what, err)
				}
				if _, err := eng.Clear(ctx, ro.intent, "ops", "why"); !errors.Is(err, fence.ErrNotFound) {
					t.Errorf("%s: refused as invalid; clear: %v; want ErrNotFound", what, err)
				}
				if _, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: ro.intent, How: fence.LeaveFenced, Reason: "why"}); !errors.Is(err, fence.ErrNotFound) {
					t.Errorf("%s: refused as invalid; resolve: %v; want ErrNotFound", what, err)
				}
				if err := st.View(ctx, func(tx fence.Tx) error {
					return tx.Events(ro.intent, func(fence.Event) bool { return true })
				}); err != nil {
					t.Errorf("%s: refused as invalid; its events: %v", what, err)
				}
				continue
			}
			if err != nil || !adm.Fresh() {
				t.Errorf("%s: prepare = %+v, %v; want a ticket or an InvalidError", what, adm, err)
				continue
			}
			c, err := eng.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
			if err != nil {
				t.Errorf("%s: commit: %v", what, err)
				continue
			}
			if c.Intent != ro.intent || c.Domain != ro.domain || c.Agent != ro.agent || c.Seq != 1 || c.Verify() != nil {
				t.Errorf("%s: cert does not keep the names: %+v", what, c)
			}
			again, err := eng.Prepare(ctx, r)
			if err != nil || again.Fresh() || again.Cert.Hash != c.Hash {
				t.Errorf("%s: duplicate = %+v, %v; want the replay", what, again, err)
			}
			if cur, err := eng.Current(ctx, ro.domain); err != nil || cur != 1 {
				t.Errorf("%s: current = %d, %v; want 1", what, cur, err)
			}
			if s, err := eng.Status(ctx, ro.intent); err != nil || s.State != fence.StateDone || s.Intent != ro.intent {
				t.Errorf("%s: status = %s %q, %v", what, s.State, s.Intent, err)
			}
		}
	}
}
