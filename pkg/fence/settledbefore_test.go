package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A clear or resolve retried after its answer was lost finds its work in the audit trail and
// says so (SettledBeforeError); but once a new attempt has claimed the intent since, the retry
// is refused like a pasted command about an earlier attempt: that attempt is unchecked, and
// "already done" would read as nothing left to do. Before 2026-12-07 (evening) the retry said
// "already cleared" and exited 0 with a new attempt holding the intent.
func TestRetryOfASettledClaimIsRefusedOnceClaimedAgain(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	claim := func(t *testing.T) fence.Ticket {
		t.Helper()
		adm, err := eng.Prepare(ctx, fence.Request{Intent: "charge:7", Tool: "charge", Args: json.RawMessage(`{"n":7}`)})
		if err != nil || !adm.Fresh() {
			t.Fatal(adm, err)
		}
		return *adm.Ticket
	}
	for _, how := range []string{"clear", "resolve"} {
		t.Run(how, func(t *testing.T) {
			settle := func(token uint64) error {
				if how == "clear" {
					_, err := eng.ClearClaim(ctx, "charge:7", token, "op", "no charge in the PSP", true)
					return err
				}
				_, err := eng.Resolve(ctx, fence.ResolveRequest{Intent: "charge:7", How: fence.DidNotHappen, Who: "op", Reason: "no charge in the PSP", Token: token})
				return err
			}
			ticket := claim(t)
			first := ticket.Token
			if how == "resolve" {
				// Resolve is about an unknown outcome: the holder lost track of its call.
				if err := eng.Lost(ctx, ticket, "the server died mid-call"); err != nil {
					t.Fatal(err)
				}
			}
			if err := settle(first); err != nil {
				t.Fatal(err)
			}
			// The retry, nothing claimed since: told from the trail, its own attempt.
			var before fence.SettledBeforeError
			if err := settle(first); !errors.As(err, &before) || !before.Mine || before.Event.Token != first {
				t.Fatalf("retry with nothing claimed since: %v; want SettledBeforeError of claim %d, mine", err, first)
			}
			// A new attempt claims the intent; the same retry now is refused.
			second := claim(t).Token
			err := settle(first)
			var nf fence.NotFencedError
			if errors.As(err, &before) || !errors.As(err, &nf) || nf.Reclaimed != second || !strings.Contains(err.Error(), "claimed again") {
				t.Fatalf("retry about claim %d with claim %d holding the intent: %v; want not_fenced naming the new claim", first, second, err)
			}
			if rec, err := eng.Status(ctx, "charge:7"); err != nil || rec.Token != second || rec.State != fence.StateInFlight {
				t.Fatalf("the new attempt after the refused retry: %+v %v", rec, err)
			}
			if _, err := eng.Clear(ctx, "charge:7", "op", "test over"); err != nil {
				t.Fatal(err)
			}
		})
	}
}
