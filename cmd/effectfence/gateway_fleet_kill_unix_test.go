//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// docs/gateway.md: a duplicate that lands on another process sharing the ledger waits for the
// first attempt; RELIABILITY.md: a claim whose holder is dead is unknown at once. Two real
// gateways on one SQLite file (one --scope): the call runs inside the first, its duplicate
// waits on the second, and the first is killed (SIGKILL) mid-call. The duplicate is told the
// call was NOT executed and that its outcome is unknown (prior_failure): its --wait, 30s, is
// shorter than the 60 s lease, so only the holder's death can end the wait with that answer
// (a waiter blind to it would be told the call is still in flight). Nothing ran twice, and the
// call sent again to the surviving gateway is refused the same way.
func TestGatewayKilledWhileAnotherWaits(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects, ledger := filepath.Join(dir, "effects"), filepath.Join(dir, "shared.db")
	args := []string{"--ledger", ledger, "--scope", "shop", "--wait", "30s", "--listen", "127.0.0.1:0",
		"--", effectfence(t), "demo-server", "--latency", "10m", "--effects", effects}
	a, b := startGateway(t, args...), startGateway(t, args...)
	send := func(g *gatewayProc, sid, id string) <-chan string {
		return g.postAsync(sid, `{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_fleet_kill"}}}`)
	}
	send(a, a.initialize(t), "2")
	waitInFlight(t, ledger, a)
	bsid := b.initialize(t)
	dup := send(b, bsid, "3")
	// No event says the duplicate has begun to wait; it is given a moment. Should it reach
	// the ledger only after the kill, it meets the dead holder's claim: the same answer.
	time.Sleep(time.Second)
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	var got string
	select {
	case got = <-dup:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the duplicate waiting on the other gateway got no answer\n%s", b.logText())
	}
	if !strings.Contains(got, "prior_failure") || !strings.Contains(got, "NOT executed") || strings.Contains(got, "ch_demo") {
		t.Fatalf("the duplicate waiting on the surviving gateway was answered %s; want a prior_failure refusal saying it was NOT executed\n%s", got, b.logText())
	}
	if again := <-send(b, bsid, "4"); !strings.Contains(again, "prior_failure") || strings.Contains(again, "ch_demo") {
		t.Fatalf("the call sent again to the surviving gateway was answered %s; want a prior_failure refusal\n%s", again, b.logText())
	}
	if n := effectsOf(t, effects); n != 0 {
		t.Fatalf("%d executions; the call was killed inside the first gateway's server and must not have run again", n)
	}
}
