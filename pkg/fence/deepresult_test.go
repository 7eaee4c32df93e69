package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestResultNestedTooDeepIsNamedSo: an effect's result that encoding/json writes (a user's
// value nested 10,001 deep) but no reader takes back is refused as what it is, nested too
// deep, by Commit, Settle and Resolve; before 2026-12-07 each said "not a JSON value", of a
// value json.Marshal had just produced. The refusal records nothing: the ticket still holds
// its claim (in flight), so its holder can record the effect another way (Abort).
func TestResultNestedTooDeepIsNamedSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var v any = 1
	for i := 0; i < 10001; i++ {
		v = []any{v}
	}
	deep, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "deep:result", Tool: "t"})
	if err != nil {
		t.Fatal(err)
	}
	named := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "nested deeper than 10000 levels") || strings.Contains(err.Error(), "not a JSON value") {
			t.Errorf("%s of a result nested 10001 deep: %v; want invalid_request saying it is nested deeper than 10000 levels", what, err)
		}
	}
	_, err = eng.Commit(ctx, *adm.Ticket, deep)
	named("Commit", err)
	_, err = eng.Settle(ctx, fence.Outcome{Kind: fence.OutcomeCommit, Ticket: *adm.Ticket, Result: deep})
	named("Settle", err)
	if rec, err := eng.Status(ctx, "deep:result"); err != nil || rec.State != fence.StateInFlight {
		t.Fatalf("after the refusals: %s %v; want the claim still in flight", rec.State, err)
	}
	if err := eng.Abort(ctx, *adm.Ticket, "its result could not be recorded"); err != nil {
		t.Fatal(err)
	}
	_, err = eng.Resolve(ctx, fence.ResolveRequest{Intent: "deep:result", How: fence.Happened, Result: deep, Who: "ops", Reason: "checked"})
	named("Resolve", err)
	// Not JSON at all is still said so.
	adm, err = eng.Prepare(ctx, fence.Request{Intent: "bad:result", Tool: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte("NaN")); !errors.Is(err, fence.ErrInvalid) || !strings.Contains(err.Error(), "not a JSON value") {
		t.Errorf("Commit of NaN: %v", err)
	}
}
