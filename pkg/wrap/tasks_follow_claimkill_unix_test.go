//go:build unix

package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/jackc/pgx/v5"
)

// TestFollowerKilledHoldingItsClaimLeavesNoUnknown: a wrap whose task follows a call held in
// another wrap (the slow tool, until a file exists) is killed with kill -9 while it holds the
// claim its follower took, before that claim's release lands. The claim is taken once an
// operator clears the first call's (with the follower's wrap stopped meanwhile), and its
// release is held by a lock on the ledger's audit trail (PostgreSQL), so the kill falls
// between the two with no clock. The next call, through a third wrap, takes the claim over and
// runs: nothing had run for it. Before 2026-12-07 the claim was an ordinary one, its holder
// gone, and the next call found the intent fenced unknown, the effect "may have happened",
// though nothing had run.
func TestFollowerKilledHoldingItsClaimLeavesNoUnknown(t *testing.T) {
	t.Parallel()
	needProc(t)
	r := newRig(t)
	r.ledger = pgtest.Ledger(t, "followerclaim")
	r.init = json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"test-agent","version":"1"}}`)
	ctx := context.Background()
	led, err := store.Open(ctx, store.Options{Ledger: r.ledger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	first := r.wrap()
	second := r.wrap("--wait", "1s")
	gate := filepath.Join(r.dir, "gate")
	args := fmt.Sprintf(`{"tag":"followerclaim","until":%q}`, gate)
	u, err := url.Parse(r.ledger)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Del("pool_min_conns") // a pool's setting: a plain connection is refused it
	u.RawQuery = q.Encode()
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	go first.Call(ctx, "tools/call", json.RawMessage(`{"name":"slow","arguments":`+args+`}`)) //nolint:errcheck // ends with the test
	waitFor(t, "the first call to hold the intent", func() bool {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM effectfence_records WHERE state = 'in_flight'").Scan(&n)
		return err == nil && n == 1
	})
	res, err := second.Call(ctx, "tools/call", json.RawMessage(`{"name":"slow","arguments":`+args+`,"task":{"ttl":600000}}`))
	if h := handleOf(t, res, err, "the task-augmented duplicate"); h.Status != "working" || !strings.HasPrefix(h.TaskID, "effectfence-task-") {
		t.Fatalf("the task-augmented duplicate: %+v, want a working task of wrap's own", h)
	}
	var intent string
	re := regexp.MustCompile(`intent (\S+): task \S+ follows the call in flight`)
	waitFor(t, "the follower to start", func() bool {
		m := re.FindStringSubmatch(second.log.String())
		if m != nil {
			intent = m[1]
		}
		return m != nil
	})
	pid := second.Pid()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rec, err := led.Engine.Status(ctx, intent)
	if err != nil || rec.State != fence.StateInFlight {
		t.Fatalf("the first call's claim: %+v %v", rec, err)
	}
	if _, err := led.Engine.ClearClaim(ctx, intent, rec.Token, "test", "an operator clears a stuck claim", true); err != nil {
		t.Fatal(err)
	}
	// Releases write the audit trail; a claim does not. Held, the follower's release waits.
	lock, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, "LOCK TABLE effectfence_events IN EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	mark := "/" + strconv.Itoa(pid) + "/"
	waitFor(t, "the follower to claim the cleared intent", func() bool {
		rec, err := led.Engine.Status(ctx, intent)
		return err == nil && rec.State == fence.StateInFlight && strings.Contains(rec.Owner, mark)
	})
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-second.Done()
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if r.effectCount() != 0 {
		t.Fatalf("%d executions before the next call, want none", r.effectCount())
	}
	third := r.wrap("--wait", "1s")
	go third.Call(ctx, "tools/call", json.RawMessage(`{"name":"slow","arguments":`+args+`}`)) //nolint:errcheck // ends with the test
	waitFor(t, "the next call to be judged", func() bool {
		rec, err := led.Engine.Status(ctx, intent)
		if err != nil {
			return false
		}
		if rec.State == fence.StateUnknown {
			t.Fatalf("the follower's claim, its wrap killed, left the intent unknown though nothing ran: %s", rec.Reason)
		}
		return rec.State == fence.StateInFlight && !strings.Contains(rec.Owner, mark)
	})
}
