package main

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGatewayBoundsTheHeadsItIsSent: clients that send request heads and never finish them
// (no keys needed: a head is read before the keys are checked) hold the gateway's memory
// while they do. 240 connections each sending 600 KB of an unfinished head, 140 MB in all,
// are more than the heads' budget (32 MiB): the gateway must close the connections past it at
// once, not hold each for the 10 s the server gives a head, and serve a whole request once
// they are gone. Each closed connection had asked for nothing, so nothing ran.
func TestGatewayBoundsTheHeadsItIsSent(t *testing.T) {
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	g := startGateway(t, "--ledger", filepath.Join(dir, "l.db"), "--listen", "127.0.0.1:0", "--api-keys", keysFile(t),
		"--", effectfence(t), "demo-server", "--latency", "1ms", "--effects", effects)
	u, err := url.Parse(g.url)
	if err != nil {
		t.Fatal(err)
	}
	const conns, size = 240, 600 << 10
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nX-Pad: %s", u.Path, u.Host, strings.Repeat("p", size))
	start := time.Now()
	var cut atomic.Int32
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			// Well within the server's 10 s for a head: a connection it has not closed by then
			// is being held, not cut.
			_ = c.SetDeadline(start.Add(7 * time.Second))
			if _, err := c.Write([]byte(head)); err != nil {
				cut.Add(1) // closed while its head came in
				return
			}
			var b [1]byte
			if _, err := c.Read(b[:]); err != nil && !isTimeout(err) {
				cut.Add(1) // closed (no answer: nothing was asked)
			}
		}()
	}
	wg.Wait()
	for _, c := range open {
		c.Close()
	}
	// 32 MiB hold at most 55 such heads, and the server would close none of the others
	// before its 10 s: 185 are cut on an idle machine, and the gateway without a budget cut
	// none. How many heads arrive within the 7 s depends on the machine's load (CI under a
	// load of 19 cut 51), so any cut passes; the count past the budget is held in process by
	// TestHeadBudgetCountsHeadsAlone.
	if n := cut.Load(); n == 0 {
		t.Fatalf("of %d connections sending unfinished heads of %d KB, the gateway closed none within 7 s; want those past the heads' budget (about %d on an idle machine)", conns, size>>10, conns-55)
	} else {
		t.Logf("the gateway closed %d of %d connections sending unfinished heads", n, conns)
	}
	sid := g.initializeAs(t, aliceToken)
	auth := "Authorization: Bearer " + aliceToken + "\r\nContent-Type: application/json\r\nAccept: application/json\r\n"
	charge := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_h"}}}`
	if code, body := rawRequest(t, g.url, "POST", auth+"Mcp-Session-Id: "+sid+"\r\n", charge); code != 200 || !strings.Contains(body, `"result"`) || effectsOf(t, effects) != 1 {
		t.Fatalf("a call after the flood: %d %.300s, %d charges; want it run once", code, body, effectsOf(t, effects))
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
