//go:build unix

package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// docs/gateway.md, "Graceful shutdown": on SIGTERM the gateway lets calls in flight finish
// for --grace, then stops the servers it started and records each fenced call still inside
// one as unknown; duplicates waiting for it are told it was not executed. Against the real
// binary, its demo server and a SQLite ledger: a call that outlasts the grace is answered as
// unknown, its duplicate (another session, waiting under --wait 2m) as NOT executed, the
// ledger holds the intent as unknown, and the same call sent to a gateway started again on
// that ledger and scope (whose server would answer at once) is refused, not run.
func TestGatewaySIGTERMPastTheGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects, ledger := filepath.Join(dir, "effects"), filepath.Join(dir, "l.db")
	gateway := func(latency string) *gatewayProc {
		return startGateway(t, "--ledger", ledger, "--scope", "grace", "--listen", "127.0.0.1:0", "--grace", "1s", "--wait", "2m",
			"--", effectfence(t), "demo-server", "--latency", latency, "--effects", effects)
	}
	const chargeCall = `{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_grace"}}}`
	send := func(g *gatewayProc, sid, id string) <-chan string {
		return g.postAsync(sid, strings.Replace(chargeCall, "ID", id, 1))
	}
	answer := func(c <-chan string, what string, g *gatewayProc) string {
		select {
		case s := <-c:
			return s
		case <-time.After(60 * time.Second):
			t.Fatalf("%s: no answer within a minute of the stop\n%s", what, g.logText())
		}
		return ""
	}

	g1 := gateway("2m") // the call outlasts any grace
	first := send(g1, g1.initialize(t), "2")
	waitInFlight(t, ledger, g1)
	dup := send(g1, g1.initialize(t), "7")
	time.Sleep(time.Second) // the duplicate is waiting for the first (--wait 2m)
	if err := g1.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if a := answer(first, "the call inside the server", g1); !strings.Contains(a, "unknown") || strings.Contains(a, "ch_demo") {
		t.Fatalf("the call still inside the server when the grace ended was answered %s; want its outcome unknown\n%s", a, g1.logText())
	}
	if a := answer(dup, "its duplicate", g1); !strings.Contains(a, "NOT executed") || strings.Contains(a, "ch_demo") {
		t.Fatalf("the duplicate waiting for it was answered %s; want it told it was NOT executed\n%s", a, g1.logText())
	}
	exited := make(chan struct{})
	go func() { _ = g1.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("the gateway did not exit within a minute of SIGTERM (grace 1s)\n%s", g1.logText())
	}

	led, err := store.Open(context.Background(), store.Options{Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	var states []fence.State
	err = led.Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(r *fence.Record) bool { states = append(states, r.State); return true })
	})
	led.Close()
	if err != nil || len(states) != 1 || states[0] != fence.StateUnknown {
		t.Fatalf("the ledger after the stop: %v %v; want one record, unknown", states, err)
	}

	g2 := gateway("1ms")
	if a := answer(send(g2, g2.initialize(t), "3"), "the call re-sent after the restart", g2); !strings.Contains(a, "prior_failure") || !strings.Contains(a, "NOT executed") {
		t.Fatalf("the call re-sent to the gateway started again was answered %s; want a prior_failure refusal\n%s", a, g2.logText())
	}
	if n := effectsOf(t, effects); n != 0 {
		t.Fatalf("%d executions; the call was stopped inside the server and must not have run again", n)
	}
}
