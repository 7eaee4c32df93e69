package postgres

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestTransactionPoolerScansThroughACursor: the views (`ledger ls`, `export`, `verify`) read
// through a cursor declared in the view's transaction, a page per round trip. Through PgBouncer
// in transaction mode a transaction keeps its server connection to its end, so a cursor lives
// as long as the scan; between transactions the pooler hands the connection to others. Here
// four views scan at once (pages of 5, a filter's parameters in the DECLARE) while four writers
// add records of their own, on a pool of 4 server connections: every view sees every record
// and event it should, in order, once, in both query modes PgBouncer supports there.
func TestTransactionPoolerScansThroughACursor(t *testing.T) {
	for _, mode := range []string{"simple_protocol", "exec"} {
		t.Run(mode, func(t *testing.T) {
			role, _ := poolerRole(t, true)
			port := startPgBouncer(t, role)
			s := openPooled(t, poolerURL(t, role, port, map[string]string{"default_query_exec_mode": mode, "pool_max_conns": "8"}))
			const page, n, nev = 5, 53, 23
			s.scanPage = page
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			var failed, unknown []string
			err := s.Update(ctx, func(tx fence.Tx) error {
				for i := range n {
					r := &fence.Record{Intent: fmt.Sprintf("r:%03d", i), State: fence.StateFailed, Tool: "t", Args: []byte(`{}`), UpdatedAt: tx.Now()}
					if i%3 == 0 {
						r.State = fence.StateUnknown
						unknown = append(unknown, r.Intent)
					} else {
						failed = append(failed, r.Intent)
					}
					if err := tx.Put(r); err != nil {
						return err
					}
				}
				for i := range nev {
					if err := tx.AppendEvent(fence.Event{At: tx.Now(), Intent: "r:000", Kind: fence.EventClear, Who: "tester", Reason: fmt.Sprint(i)}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for w := range 4 {
				wg.Add(1)
				go func() { // a writer: records of its own, none in the views' filter
					defer wg.Done()
					for i := range 20 {
						err := s.Update(ctx, func(tx fence.Tx) error {
							return tx.Put(&fence.Record{Intent: fmt.Sprintf("w:%d:%02d", w, i), State: fence.StateDone, Tool: "t", Args: []byte(`{}`), UpdatedAt: tx.Now()})
						})
						if err != nil {
							errs <- fmt.Errorf("writer %d: %w", w, err)
							return
						}
					}
				}()
			}
			for v := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for round := range 5 {
						var gotFailed, gotUnknown, reasons []string
						err := s.View(ctx, func(tx fence.Tx) error {
							gotFailed, gotUnknown, reasons = gotFailed[:0], gotUnknown[:0], reasons[:0]
							// Two cursors of one transaction, the second declared while the first is open.
							err := tx.Scan(fence.Filter{States: []fence.State{fence.StateFailed}}, func(r *fence.Record) bool {
								gotFailed = append(gotFailed, r.Intent)
								if len(gotFailed) == page+1 {
									return tx.Scan(fence.Filter{States: []fence.State{fence.StateUnknown}, After: "r:"}, func(r *fence.Record) bool {
										gotUnknown = append(gotUnknown, r.Intent)
										return true
									}) == nil
								}
								return true
							})
							if err != nil {
								return err
							}
							return tx.Events("r:000", func(ev fence.Event) bool {
								reasons = append(reasons, ev.Reason)
								return true
							})
						})
						switch {
						case err != nil:
							errs <- fmt.Errorf("view %d round %d: %w", v, round, err)
							return
						case !slices.Equal(gotFailed, failed):
							errs <- fmt.Errorf("view %d round %d: failed records %v, want %v", v, round, gotFailed, failed)
						case !slices.Equal(gotUnknown, unknown):
							errs <- fmt.Errorf("view %d round %d: unknown records %v, want %v", v, round, gotUnknown, unknown)
						case len(reasons) != nev || reasons[0] != "0" || reasons[nev-1] != fmt.Sprint(nev-1):
							errs <- fmt.Errorf("view %d round %d: events %v, want %d oldest first", v, round, reasons, nev)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}
