//go:build unix

package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// An upstream stopped (SIGSTOP) with a fenced call inside it, for longer than the lease: the
// gateway is alive and renews the lease while it waits, so the claim stays in flight, never
// unknown and never taken over; a duplicate in another session waits (--wait), then is told
// it was NOT executed. Once the upstream resumes, the first call's outcome is recorded and a
// later duplicate is replayed: one execution. The upstream is a real gateway passing
// charge_card through unfenced to its demo server, whose effects count what reached it.
func TestUpstreamStoppedPastTheLease(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects, ledger := filepath.Join(dir, "effects"), filepath.Join(dir, "l.db")
	up := startGateway(t, "--ledger", "memory", "--listen", "127.0.0.1:0", "--pass", "charge_card",
		"--", effectfence(t), "demo-server", "--latency", "200ms", "--effects", effects)
	g := startGateway(t, "--ledger", ledger, "--listen", "127.0.0.1:0", "--lease-secs", "1", "--wait", "1s", "--upstream", up.url)
	open := func() string {
		resp, body := g.post(t, "", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		sid := resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != http.StatusOK || sid == "" {
			t.Fatalf("initialize: %d %s\n%s", resp.StatusCode, body, g.logText())
		}
		g.post(t, "", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return sid
	}
	charge := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_stall"}}}`, id)
	}
	a, b := open(), open()
	g.post(t, "", b, `{"jsonrpc":"2.0","id":9,"method":"tools/list"}`) // b knows the tools before the stop
	led, err := store.Open(context.Background(), store.Options{Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	states := func() map[fence.State]int {
		n := map[fence.State]int{}
		err := led.Store().View(context.Background(), func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{}, func(r *fence.Record) bool { n[r.State]++; return true })
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Stop the upstream the moment the call is claimed: it is sent, or about to be.
	first := make(chan string, 1)
	go func() { _, body := g.post(t, "", a, charge(2)); first <- body }()
	deadline := time.Now().Add(30 * time.Second)
	for states()[fence.StateInFlight] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the call was not claimed\n%s", g.logText())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := up.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = up.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()
	time.Sleep(2500 * time.Millisecond) // two and a half leases

	var lease time.Time
	err = led.Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{States: []fence.State{fence.StateInFlight}}, func(r *fence.Record) bool { lease = r.LeaseUntil; return true })
	})
	if err != nil || !lease.After(time.Now()) {
		t.Fatalf("after two and a half leases with its holder alive, the claim's lease runs until %v (%v): not renewed", lease, err)
	}
	_, dup := g.post(t, "", b, charge(3)) // waits --wait (1 s), then gives up
	if !strings.Contains(dup, `"effectfence/code":"intent_in_flight"`) || !strings.Contains(dup, "NOT executed a second time") {
		t.Fatalf("a duplicate while the upstream is stopped was answered %s; want intent_in_flight: NOT executed a second time", dup)
	}
	if n := states(); n[fence.StateInFlight] != 1 || len(n) != 1 {
		t.Fatalf("after the duplicate: states %v, want the one claim still in flight (never unknown)", n)
	}

	if err := up.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	if body := <-first; !strings.Contains(body, "ch_demo_0001") {
		t.Fatalf("the first call, once the upstream resumed, was answered %s\n%s", body, g.logText())
	}
	if _, again := g.post(t, "", b, charge(4)); !strings.Contains(again, "effectfence/replayed") || !strings.Contains(again, "ch_demo_0001") {
		t.Fatalf("a later duplicate was answered %s; want the recorded result", again)
	}
	if n := effectsOf(t, effects); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}
