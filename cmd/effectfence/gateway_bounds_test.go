package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/demo"
	"github.com/effectfence/effectfence/pkg/gatewaymetrics"
	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// boundsGW is the real gateway (newGateway's server, handler chain and front) served in this
// process on a real TCP listener, over demo-server children and a SQLite ledger, with its
// bounds lowered so a test takes seconds.
type boundsGW struct {
	url, host, effects string
	led                *store.Ledger
	log                *syncbuf.Buffer
}

func startBoundsGW(t *testing.T, bodyTimeout, connIdle, latency time.Duration) *boundsGW {
	t.Helper()
	bin := effectfence(t)
	dir := t.TempDir()
	led, err := store.Open(context.Background(), store.Options{Ledger: filepath.Join(dir, "l.db")})
	if err != nil {
		t.Fatal(err)
	}
	g := &boundsGW{effects: filepath.Join(dir, "effects"), led: led, log: &syncbuf.Buffer{}}
	opt := wrap.Options{
		Command: []string{bin, "demo-server", "--latency", latency.String(), "--effects", g.effects},
		Engine:  led.Engine, Log: g.log, Grace: time.Second, Shared: wrap.NewShared(),
		Scope: store.WrapScope([]string{"demo-server"}, "bounds-test", nil, "").ID,
	}
	lc := &listenConfig{addr: "127.0.0.1:0", front: httpfront.Config{Loopback: true, BodyTimeout: bodyTimeout}, connIdle: connIdle}
	gw, err := newGateway(lc, g.log, func(httpfront.Caller) (*wrap.Proxy, error) { return wrap.New(opt) }, gatewaymetrics.New())
	if err != nil {
		t.Fatal(err)
	}
	g.host = gw.ln.Addr().String()
	g.url = "http://" + g.host + httpfront.DefaultPath
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.serve(ctx, streams{err: g.log}, time.Second) }()
	t.Cleanup(func() {
		cancel()
		<-done
		led.Close()
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.log.String())
		}
	})
	return g
}

const boundsInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

func boundsCharge(id int, customer string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":%q}}}`, id, customer)
}

// postTo POSTs body on the session (if any), accepting accept, and returns the answer whole.
func postTo(t *testing.T, u, sid, accept, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// openSession initializes a session and returns its id.
func openSession(t *testing.T, u string) string {
	t.Helper()
	resp, body := postTo(t, u, "", "application/json, text/event-stream", boundsInit)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	postTo(t, u, sid, "application/json, text/event-stream", `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}

// trickleCall sends, on a new TCP connection to rawURL, the headers of a POST of a charge_card
// call and then its body one byte every 100 ms (the whole body would take over 10 s), and
// returns how long until the gateway had answered and closed the connection, and the answer's
// status; the test fails if that took longer than limit.
func trickleCall(t *testing.T, rawURL, sid, customer string, limit time.Duration) (time.Duration, int) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	// The time is counted from before the connection is made: the gateway starts its bound
	// when its handler begins, which may be before this goroutine, having written the
	// request's head, reads the clock (counted from after the write, /healthz was once cut
	// 297.7 ms into a 300 ms bound).
	start := time.Now()
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := boundsCharge(7, customer)
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n", u.Path, u.Host, sid, len(body))
	stop := make(chan struct{})
	trickled := make(chan struct{})
	defer func() { close(stop); <-trickled }()
	go func() {
		defer close(trickled)
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
	_ = conn.SetReadDeadline(start.Add(limit))
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a body trickling in for %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); !closed(err) {
		t.Fatalf("after the answer to a trickling body (%d), the connection was not closed within %s: %v", resp.StatusCode, limit, err)
	}
	return time.Since(start), resp.StatusCode
}

// closed says a read's error means the peer closed the connection: EOF, or a reset (a byte
// still trickling in after the close draws one), not a timeout.
func closed(err error) bool {
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// docs/gateway.md, --body-timeout: a client that sends a POST's headers and then its body one
// byte a second is answered 408 and cut off once the bound is over; the call never reaches the
// server and the ledger holds nothing of it; the session goes on.
func TestSlowBodyIsCutAndRunsNothing(t *testing.T) {
	t.Parallel()
	const bound = 400 * time.Millisecond
	g := startBoundsGW(t, bound, time.Minute, 10*time.Millisecond)
	sid := openSession(t, g.url)
	took, status := trickleCall(t, g.url, sid, "cus_slow", 5*time.Second)
	if status != http.StatusRequestTimeout || took < bound {
		t.Fatalf("a trickling body: %d after %s, want 408 after %s", status, took, bound)
	}
	time.Sleep(200 * time.Millisecond) // a call that was dispatched would have run by now
	if n, _ := demo.CountEffects(g.effects); n != 0 {
		t.Fatalf("%d executions from a body that never arrived, want 0", n)
	}
	st, err := g.led.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.SinceBoot.IsZero() || !st.Ledger.IsZero() {
		t.Fatalf("the ledger counted a call whose body never arrived: %s", st.Line())
	}
	// The same call, sent whole, runs: nothing was claimed or recorded for it.
	if resp, body := postTo(t, g.url, sid, "application/json", boundsCharge(8, "cus_slow")); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"result"`) || strings.Contains(body, "replayed") {
		t.Fatalf("the call sent whole: %d %s", resp.StatusCode, body)
	}
	if n, _ := demo.CountEffects(g.effects); n != 1 {
		t.Fatalf("%d executions of the call sent whole, want 1", n)
	}
}

// The bound holds for the gateway's other endpoints too: /healthz answers a POST at once
// without reading its body, which the server then drains; a body trickling in is cut there.
func TestSlowBodyToHealthzIsCut(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	g := startBoundsGW(t, bound, time.Minute, time.Millisecond)
	took, status := trickleCall(t, "http://"+g.host+"/healthz", "", "cus_h", 4*time.Second)
	if status != http.StatusOK || took < bound {
		t.Fatalf("/healthz with a trickling body: %d, closed after %s; want 200 and the connection cut after %s", status, took, bound)
	}
}

// The same through the binary and its flag: `--body-timeout 500ms` cuts a trickling body.
func TestBodyTimeoutFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	effects := filepath.Join(dir, "effects")
	g := startGateway(t, "--ledger", filepath.Join(dir, "l.db"), "--listen", "127.0.0.1:0", "--body-timeout", "500ms",
		"--", effectfence(t), "demo-server", "--latency", "1ms", "--effects", effects)
	sid := openSession(t, g.url)
	took, status := trickleCall(t, g.url, sid, "cus_flag", 5*time.Second)
	if status != http.StatusRequestTimeout || took < 500*time.Millisecond {
		t.Fatalf("--body-timeout 500ms, a trickling body: %d after %s, want 408 after 500ms", status, took)
	}
	time.Sleep(200 * time.Millisecond)
	if n, _ := demo.CountEffects(effects); n != 0 {
		t.Fatalf("%d executions from a body that never arrived, want 0", n)
	}
}

// The body bound ends with the body: a call that runs three times as long as the bound is
// answered over SSE and as JSON, and a GET stream stays open past it.
func TestSlowCallOutlivesBodyBound(t *testing.T) {
	t.Parallel()
	const bound = 300 * time.Millisecond
	g := startBoundsGW(t, bound, time.Minute, 3*bound)
	sid := openSession(t, g.url)

	req, _ := http.NewRequest(http.MethodGet, g.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	get, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer get.Body.Close()
	if get.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %d", get.StatusCode)
	}
	getEnded := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, get.Body)
		getEnded <- err
	}()

	for i, accept := range []string{"application/json, text/event-stream", "application/json"} {
		start := time.Now()
		resp, body := postTo(t, g.url, sid, accept, boundsCharge(10+i, fmt.Sprintf("cus_long_%d", i)))
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"result"`) || strings.Contains(body, `"isError":true`) {
			t.Fatalf("Accept %q: a call longer than the body bound: %d after %s: %q", accept, resp.StatusCode, time.Since(start), body)
		}
		if took := time.Since(start); took < 2*bound {
			t.Fatalf("the call took %s, not longer than the body bound (%s): the test shows nothing", took, bound)
		}
	}
	select {
	case err := <-getEnded:
		t.Fatalf("the GET stream ended after the body bound: %v", err)
	default:
	}
	if n, _ := demo.CountEffects(g.effects); n != 2 {
		t.Fatalf("%d executions, want 2", n)
	}
}

// A keep-alive connection left idle is closed after the server's IdleTimeout.
func TestIdleKeepAliveIsClosed(t *testing.T) {
	t.Parallel()
	const idle = 300 * time.Millisecond
	g := startBoundsGW(t, time.Minute, idle, time.Millisecond)
	conn, err := net.Dial("tcp", g.host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", g.host)
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("/healthz: %d, close %v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(3 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("an idle keep-alive connection after %s: %v; want it closed (EOF)", time.Since(start).Round(time.Millisecond), err)
	}
	if took := time.Since(start); took < idle/2 {
		t.Fatalf("an idle connection closed after %s, before its idle bound %s", took, idle)
	}
}
