package wrap_test

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/jackc/pgx/v5"
)

// TestPostgresPoolSizeIsTheURLs: docs/postgres.md tells a fleet what each wrap holds on the
// server (a pool of up to 16 connections, 8 kept open) and that pool_max_conns and
// pool_min_conns in the URL size it. Two real wraps on one PostgreSQL ledger, told apart by
// application_name: the one with the defaults keeps 8 to 16 connections; the one whose URL
// says pool_max_conns=2&pool_min_conns=1 never holds more than 2, even with 8 calls at once.
func TestPostgresPoolSizeIsTheURLs(t *testing.T) {
	t.Parallel()
	ledger := pgtest.Ledger(t, "wrappool")
	with := func(params map[string]string) string {
		u, err := url.Parse(ledger)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		for k, v := range params {
			if v == "" {
				q.Del(k) // the store's default
				continue
			}
			q.Set(k, v)
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	tag := fmt.Sprintf("efpool%d", time.Now().UnixNano())
	small, dflt := tag+"_small", tag+"_default"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	held := func(app string) int {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	rs, rd := newRig(t), newRig(t)
	rs.ledger = with(map[string]string{"application_name": small, "pool_max_conns": "2", "pool_min_conns": "1"})
	rd.ledger = with(map[string]string{"application_name": dflt, "pool_min_conns": ""})
	ws, wd := rs.wrap(), rd.wrap()
	most := 0
	var mu sync.Mutex
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() { // how many the small pool holds, while its calls run
		defer close(watched)
		for {
			n := held(small)
			mu.Lock()
			most = max(most, n)
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 5 {
				for _, w := range []*wrapProc{ws, wd} {
					if res, err := callE(w.Session, "charge", fmt.Sprintf(`{"amount":%d,"order":"pool-%d-%d"}`, 100+i, i, j)); err != nil || res.IsError {
						t.Errorf("charge: %+v, %v", res, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-watched
	if n := held(small); n > 2 || most > 2 {
		t.Errorf("the wrap whose URL says pool_max_conns=2 held %d connections at most (%d now)", most, n)
	}
	if most == 0 {
		t.Fatal("the small pool was never seen on the server: application_name did not reach it, and the test proves nothing")
	}
	// The default pool keeps 8 open (it fills them in the background) and never more than 16.
	var n int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n = held(dflt); n >= 8 || time.Now().After(deadline) {
			break
		}
	}
	if n < 8 || n > 16 {
		t.Errorf("the wrap with the default pool holds %d connections; docs/postgres.md says 8 to 16", n)
	}
	ws.Close()
	wd.Close()
}
