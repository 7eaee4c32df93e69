package sqlite_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestRedactedAndHashOnlyNeverReachTheFile: with a field redacted and only the result's digest
// kept, neither secret is anywhere in the ledger's files (database, WAL), and after a reopen a
// duplicate is told the result was not kept instead of running again.
func TestRedactedAndHashOnlyNeverReachTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	const card, apiKey = "4111111111111111", "sk_live_0123456789abcdef"
	req := fence.Request{Intent: "charge:1", Tool: "charge", Args: []byte(`{"amount":4900,"card":"` + card + `"}`),
		Redact: []string{"card"}, KeepResult: fence.KeepHash}
	st := openT(t, path, sqlite.Options{})
	eng := fence.New(st, fence.Config{})
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1","api_key":"`+apiKey+`"}`)); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ledger.db*"))
	if len(files) == 0 {
		t.Fatal("no ledger files")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{card, apiKey} {
			if bytes.Contains(b, []byte(secret)) {
				t.Fatalf("%s contains %s", f, secret)
			}
		}
	}
	eng = fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	dup, err := eng.Prepare(ctx, req)
	if err != nil || dup.Fresh() || !dup.ResultNotKept || dup.RecordedAt.IsZero() {
		t.Fatalf("duplicate after reopen: %+v %v", dup, err)
	}
}

// TestLateResultOfAHashOnlyClaimKeepsOnlyItsDigest: a commit that arrives after its claim was
// aborted, or aborted and cleared by an operator, is refused and kept in the audit trail (a
// late_result event, never swept). For a claim that keeps only its result's digest, the event
// keeps only that digest too: the result itself reaches neither the database nor its WAL. A
// ticket handed back without its keep_hash mark (as an agent may) is judged by the record
// while it is still that claim's.
func TestLateResultOfAHashOnlyClaimKeepsOnlyItsDigest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	st := openT(t, path, sqlite.Options{})
	eng := fence.New(st, fence.Config{})
	const cleared, aborted = "sk_live_cleared_0123456789", "sk_live_aborted_0123456789"
	late := func(intent string, strip bool, clear bool, secret string) {
		t.Helper()
		req := fence.Request{Intent: intent, Tool: "issue_key", Args: []byte(`{"user":"u1"}`), KeepResult: fence.KeepHash}
		adm, err := eng.Prepare(ctx, req)
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare %s: %+v %v", intent, adm, err)
		}
		tk := *adm.Ticket
		if !tk.KeepHash {
			t.Fatalf("the ticket of a hash-only claim does not say so: %+v", tk)
		}
		if err := eng.Abort(ctx, tk, "gateway timeout"); err != nil {
			t.Fatal(err)
		}
		if clear {
			if _, err := eng.Clear(ctx, intent, "ops", "checked: no key issued"); err != nil {
				t.Fatal(err)
			}
		}
		if strip {
			tk.KeepHash = false
		}
		result := []byte(`{"key":"` + secret + `"}`)
		if _, err := eng.Commit(ctx, tk, result); fence.CodeOf(err) != "lease_lost" {
			t.Fatalf("late commit of %s: %v; want lease_lost", intent, err)
		}
		sum, err := fence.ResultSHA256(result)
		if err != nil {
			t.Fatal(err)
		}
		var kept []fence.Event
		if err := st.View(ctx, func(tx fence.Tx) error {
			return tx.Events(intent, func(ev fence.Event) bool {
				if ev.Kind == fence.EventLateResult {
					kept = append(kept, ev)
				}
				return true
			})
		}); err != nil {
			t.Fatal(err)
		}
		if len(kept) != 1 || !strings.Contains(kept[0].Reason, sum) || strings.Contains(kept[0].Reason, secret) {
			t.Fatalf("late result of %s in the audit trail: %+v; want one event with the digest %s only", intent, kept, sum)
		}
	}
	late("key:cleared", false, true, cleared)
	late("key:aborted", true, false, aborted)
	// A late result of a claim that keeps its result is kept whole, as before.
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "charge:1", Tool: "charge", Args: []byte(`{"amount":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := eng.Abort(ctx, *adm.Ticket, "timeout"); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_late"}`)); fence.CodeOf(err) != "lease_lost" {
		t.Fatalf("late commit: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ledger.db*"))
	var whole bool
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{cleared, aborted} {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s contains %s", f, secret)
			}
		}
		whole = whole || bytes.Contains(b, []byte(`ch_late`))
	}
	if !whole {
		t.Error("the late result of a claim that keeps its result was not kept")
	}
}

// TestHealedHashOnlyClaimKeepsOnlyItsDigest: a hash-only claim whose lease lapsed (its holder
// on another host, out of sight) is unknown; its holder's own late commit heals it. The healed
// record keeps only the result's digest, like any commit of the claim: the result reaches
// neither the database nor its WAL, and a duplicate after a reopen is told it was not kept.
func TestHealedHashOnlyClaimKeepsOnlyItsDigest(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	st := openT(t, path, sqlite.Options{})
	const secret = "sk_live_healed_0123456789"
	req := fence.Request{Intent: "key:healed", Tool: "issue_key", Args: []byte(`{"user":"u1"}`), KeepResult: fence.KeepHash}
	holder := fence.New(st, fence.Config{LeaseTTL: 50 * time.Millisecond, Owner: "elsewhere/1/1"})
	adm, err := holder.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	time.Sleep(150 * time.Millisecond) // past the lease
	other := fence.New(st, fence.Config{})
	if _, err := other.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := other.Status(ctx, req.Intent); err != nil || rec.State != fence.StateUnknown || !rec.Healable() {
		t.Fatalf("the lapsed claim: %+v %v; want unknown, healable", rec, err)
	}
	cert, err := holder.Commit(ctx, *adm.Ticket, []byte(`{"key":"`+secret+`"}`))
	if err != nil {
		t.Fatalf("the holder's late commit: %v", err)
	}
	if _, ok := cert.ResultNotKept(); !ok {
		t.Fatalf("the healed cert keeps its result: %s", cert.Result)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ledger.db*"))
	for _, f := range files {
		if b, err := os.ReadFile(f); err != nil || bytes.Contains(b, []byte(secret)) {
			t.Fatalf("%s holds the healed result (%v)", f, err)
		}
	}
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	if dup, err := eng.Prepare(ctx, req); err != nil || dup.Fresh() || !dup.ResultNotKept {
		t.Fatalf("duplicate after the heal and a reopen: %+v %v", dup, err)
	}
}
