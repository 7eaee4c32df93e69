package main

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/diskfull"
)

// The gateway (`wrap --listen`, the real binary) with its SQLite ledger, and so its spool, on
// a small file system that fills while a fenced call runs in a child, and stays full past the
// lease (1 s here, the time wrap retries before it spools). The outcome is in neither the
// ledger nor the spool, only in the gateway's memory, so the agent's answer waits. Then:
//   - disk-back: the disk has room again: the call is answered with its result, and its
//     duplicate (another session) replays it;
//   - killed: SIGKILL: no answer; the restarted gateway fences the duplicate as unknown;
//   - stopped: SIGTERM: the gateway exits without waiting for the disk, and tells the agent
//     the outcome is unknown rather than hand out the result it could not record; the
//     duplicate is fenced.
//
// The call runs once in every case (pkg/wrap's TestFullDiskPastTheLeaseHoldsTheAnswer holds
// the same for stdio wrap).
func TestGatewayFullDiskPastTheLeaseHoldsTheAnswer(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"disk-back", "killed", "stopped"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			disk := diskfull.Mount(t, 8<<20)
			effects, ledger := filepath.Join(t.TempDir(), "effects"), filepath.Join(disk, "l.db")
			args := []string{"--lease-secs", "1", "--grace", "1s", "--ledger", ledger, "--listen", "127.0.0.1:0",
				"--", effectfence(t), "demo-server", "--latency", "1500ms", "--effects", effects}
			const charge = `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_full"}}}`
			client := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
			open := func(g *gatewayProc) string {
				resp, body := postWith(t, client, g.url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
				sid := resp.Header.Get("Mcp-Session-Id")
				if sid == "" {
					t.Fatalf("initialize: %s\n%s", body, g.logText())
				}
				postWith(t, client, g.url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
				return sid
			}
			g := startGateway(t, args...)
			sid := open(g)
			type answer struct {
				body string
				err  error
			}
			got := make(chan answer, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(charge))
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Mcp-Session-Id", sid)
				resp, err := client.Do(req)
				if err != nil {
					got <- answer{"", err}
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				got <- answer{string(b), err}
			}()
			waitInFlight(t, ledger, g)
			filler := diskfull.Fill(t, disk)
			deadline := time.Now().Add(30 * time.Second)
			for !strings.Contains(g.logText(), "held in this process's memory") {
				if time.Now().After(deadline) {
					t.Fatalf("the outcome was not held in memory\n%s", g.logText())
				}
				time.Sleep(10 * time.Millisecond)
			}
			select {
			case a := <-got:
				t.Fatalf("answered while its outcome was in neither the ledger nor the spool: %s %v\n%s", a.body, a.err, g.logText())
			case <-time.After(3 * time.Second):
			}
			if end == "disk-back" {
				if err := os.Remove(filler); err != nil {
					t.Fatal(err)
				}
				if a := <-got; a.err != nil || !strings.Contains(a.body, "charged $49.00") {
					t.Fatalf("the call once the disk had room: %s %v\n%s", a.body, a.err, g.logText())
				}
				if _, dup := postWith(t, client, g.url, open(g), strings.Replace(charge, `"id":2`, `"id":3`, 1)); !strings.Contains(dup, "effectfence/replayed") {
					t.Fatalf("its duplicate: %s; want the recorded result\n%s", dup, g.logText())
				}
			} else {
				sig := syscall.SIGKILL
				if end == "stopped" {
					sig = syscall.SIGTERM
				}
				if err := g.cmd.Process.Signal(sig); err != nil {
					t.Fatal(err)
				}
				exited := make(chan struct{})
				go func() { _ = g.cmd.Wait(); close(exited) }()
				select {
				case <-exited:
				case <-time.After(30 * time.Second):
					t.Fatalf("the gateway did not exit within 30 s of %v with the disk full\n%s", sig, g.logText())
				}
				// Killed: no answer. Stopped: told the outcome is unknown, not given the result.
				a := <-got
				if strings.Contains(a.body, "charged $49.00") || end == "stopped" && !strings.Contains(a.body, "NOT be executed again") {
					t.Fatalf("a gateway that ended (%v) before the outcome was kept answered: %q %v\n%s", sig, a.body, a.err, g.logText())
				}
				if err := os.Remove(filler); err != nil {
					t.Fatal(err)
				}
				g2 := startGateway(t, args...)
				if _, dup := postWith(t, client, g2.url, open(g2), strings.Replace(charge, `"id":2`, `"id":3`, 1)); !strings.Contains(dup, "prior_failure") || !strings.Contains(dup, "NOT executed") {
					t.Fatalf("the duplicate after the gateway ended: %s; want it fenced\n%s", dup, g2.logText())
				}
			}
			if n := effectsOf(t, effects); n != 1 {
				t.Fatalf("%d executions, want 1", n)
			}
		})
	}
}
