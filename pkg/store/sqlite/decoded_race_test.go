package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// Two stores on one file (as two processes) write, roll back and delete records of a few
// intents at sizes on both sides of decodedMaxBody, while readers on one of them check, in
// each of their transactions, that Get answers exactly what the file holds in that
// transaction's view: the decoded-record cache (its big table included) never answers for
// other bytes, whatever the interleaving of puts, evictions, rollbacks and other writers.
func TestDecodedCacheAgreesWithTheFileUnderConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	a, b := twoStores(t)
	intents := []string{"i0", "i1", "i2"}
	sizes := []int{10, 20 << 10, 24 << 10}
	errUndo := errors.New("undo")
	const rounds = 150
	var wg sync.WaitGroup
	writer := func(s *Store, who string) {
		defer wg.Done()
		for n := range rounds {
			intent := intents[n%len(intents)]
			reason := fmt.Sprintf("%s-%d-%s", who, n, strings.Repeat("p", sizes[(n/3)%len(sizes)]))
			err := s.Update(ctx, func(tx fence.Tx) error {
				if n%7 == 6 {
					return tx.Delete(intent)
				}
				if err := tx.Put(&fence.Record{Intent: intent, State: fence.StateFailed, Fingerprint: "fp", Tool: "t", Reason: reason}); err != nil {
					return err
				}
				if n%5 == 4 {
					return errUndo
				}
				return nil
			})
			if err != nil && !errors.Is(err, errUndo) {
				t.Error(err)
				return
			}
		}
	}
	check := func(tx fence.Tx) error {
		for _, intent := range intents {
			got, err := tx.Get(intent)
			if err != nil {
				return err
			}
			var body []byte
			err = tx.(*txn).queryRow(qGet, []any{intent}, &body)
			if errors.Is(err, sql.ErrNoRows) {
				if got != nil {
					return fmt.Errorf("%s: Get answered %.12q; the file holds no record", intent, got.Reason)
				}
				continue
			}
			if err != nil {
				return err
			}
			want, err := tx.(*txn).decode(intent, body)
			if err != nil {
				return err
			}
			if got == nil || got.Reason != want.Reason {
				return fmt.Errorf("%s: Get answered %v; the file holds %.12q", intent, got != nil, want.Reason)
			}
		}
		return nil
	}
	reader := func(s *Store, update bool) {
		defer wg.Done()
		for range rounds {
			var err error
			if update {
				err = s.Update(ctx, check)
			} else {
				err = s.View(ctx, check)
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	}
	wg.Add(6)
	go writer(a, "a")
	go writer(a, "a2")
	go writer(b, "b")
	go reader(a, false)
	go reader(a, true)
	go reader(b, false)
	wg.Wait()
}
