package httpfront_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// Config.BodyTimeout: a POST whose body trickles in (one byte every 100 ms; the whole would
// take seconds) is answered 408 once the bound is over, its connection closed, and nothing
// runs or reaches the ledger.
func TestSlowBodyRefused(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.BodyTimeout = bound })
	sid := g.open(nil)
	u, _ := url.Parse(g.url)
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := call(5, "charge", `{"amount":5}`)
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json\r\nMcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n", u.Path, u.Host, sid, len(body))
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for i := 0; i < len(body); i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(4 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a trickling body after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		t.Fatalf("a trickling body: %d (close %v), want 408 and the connection closed", resp.StatusCode, resp.Close)
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(mcptest.Effects(g.effects)); n != 0 {
		t.Fatalf("%d executions from a body that never arrived, want 0", n)
	}
	if st, err := g.led.Stats(context.Background()); err != nil || !st.SinceBoot.IsZero() {
		t.Fatalf("the ledger counted a call whose body never arrived: %s (%v)", st.Line(), err)
	}
}
