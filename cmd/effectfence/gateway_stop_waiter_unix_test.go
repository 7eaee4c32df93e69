//go:build unix

package main

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docs/gateway.md, Graceful shutdown: a fenced call still inside the server when the grace
// is over is recorded unknown, and "duplicates waiting for it are told it was not executed".
// A duplicate waiting in another session of the stopping gateway is answered with what is
// true at that moment: it was NOT executed, it stopped waiting because the gateway stops (not
// after its --wait of 5 minutes), and a retry is not promised the recorded result, since the
// call it waited for is cut by the stop and left unknown. Before, it was told "waited 5m0s",
// and "retry later and the retry will receive the recorded result", and the retry was refused
// prior_failure.
func TestStoppingGatewayTellsItsWaiterTheTruth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects, ledger := filepath.Join(dir, "effects"), filepath.Join(dir, "l.db")
	g := startGateway(t, "--ledger", ledger, "--wait", "5m", "--grace", "1s", "--listen", "127.0.0.1:0",
		"--", effectfence(t), "demo-server", "--latency", "10m", "--effects", effects)
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_stop_waiter"}}}`
	held := g.postAsync(g.initialize(t), call)
	waitInFlight(t, ledger, g)
	dup := g.postAsync(g.initialize(t), call)
	time.Sleep(time.Second) // no event says the duplicate waits; it is given a moment
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var got string
	select {
	case got = <-dup:
	case <-time.After(time.Minute):
		t.Fatalf("the waiting duplicate got no answer from the stopping gateway\n%s", g.logText())
	}
	<-held
	if !strings.Contains(got, "NOT executed") {
		t.Fatalf("the duplicate was answered %s; want that it was NOT executed\n%s", got, g.logText())
	}
	for _, lie := range []string{"waited 5m0s", "will receive the recorded result"} {
		if strings.Contains(got, lie) {
			t.Fatalf("the duplicate waiting in the stopping gateway was told %q: %s\n%s", lie, got, g.logText())
		}
	}
	if !strings.Contains(got, "stopping") {
		t.Fatalf("the duplicate was not told the gateway stops: %s", got)
	}
	// The stopping session of the duplicate, answered once the grace was over, has nothing
	// left to list (before, its log line read "with 0 calls still running: .").
	if strings.Contains(g.logText(), "0 calls still running") {
		t.Fatalf("the log lists no call as still running:\n%s", g.logText())
	}
	if n := effectsOf(t, effects); n != 0 {
		t.Fatalf("%d executions; want none (the call was cut inside the server)", n)
	}
}
