package fencetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// CheckEventsPastUnreadable checks a store whose intent "charge:1" has n audit events, the
// i-th with the reason fmt.Sprint(i), of which those at the indices at were damaged in the
// store (rows damaged, in order): fence.EventsSkipping, of that intent and of every intent,
// gives every other event in order and names each damaged one by its intent and row, with the
// statement that removes it (its tail: deleteOf of the row); the engine's Events ends with an
// error, which the caller checks (Events' error is returned).
func CheckEventsPastUnreadable(t *testing.T, st fence.Store, n int, at []int, damaged []int64, deleteOf func(id int64) string) error {
	t.Helper()
	ctx := context.Background()
	var want []string
	for i := range n {
		if !slices.Contains(at, i) {
			want = append(want, fmt.Sprint(i))
		}
	}
	for _, intent := range []string{"charge:1", ""} {
		var got []string
		var bad []int64
		err := st.View(ctx, func(tx fence.Tx) error {
			got, bad = nil, nil
			s, ok := tx.(fence.EventsSkipping)
			if !ok {
				return errors.New("the store's Tx does not skip unreadable events")
			}
			return s.EventsSkipping(intent, func(ev fence.Event) bool {
				got = append(got, ev.Reason)
				return true
			}, func(u *fence.UnreadableEventError) {
				if u.Intent != "charge:1" || !strings.Contains(u.Error(), deleteOf(u.ID)) {
					t.Errorf("unreadable event %d: %q of %q", u.ID, u.Error(), u.Intent)
				}
				bad = append(bad, u.ID)
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != strings.Join(want, ",") || fmt.Sprint(bad) != fmt.Sprint(damaged) {
			t.Errorf("events of %q: %d read (want %d), unreadable %v (want %v)", intent, len(got), len(want), bad, damaged)
		}
	}
	return st.View(ctx, func(tx fence.Tx) error {
		return tx.Events("charge:1", func(fence.Event) bool { return true })
	})
}
