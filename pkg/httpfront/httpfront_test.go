package httpfront_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

func TestMain(m *testing.M) {
	mcptest.MaybeServe()
	os.Exit(m.Run())
}

// logBuf is a goroutine-safe log.
type logBuf = syncbuf.Buffer

// gw is a gateway under test: the front over real child processes (this test binary as the
// mcptest server) and a real SQLite ledger.
type gw struct {
	t       *testing.T
	url     string
	front   *httpfront.Handler
	effects string
	led     *store.Ledger
	log     *logBuf

	mu      sync.Mutex
	proxies []*wrap.Proxy // every session's, in the order they were made
}

// gwClient sends the helpers' requests on a transport of the tests' own: a parallel test's
// httptest.Server.Close closes http.DefaultTransport's idle connections, and a request that
// had just taken one failed ("CloseIdleConnections called": TestDeleteRecordsUnknown, CI
// 2026-12-07).
var gwClient = &http.Client{Transport: &http.Transport{}}

// inFlight is the number of requests the sessions' proxies are serving.
func (g *gw) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, p := range g.proxies {
		n += len(p.InFlight())
	}
	return n
}

func newGW(t *testing.T, tweak func(*httpfront.Config, *wrap.Options)) *gw {
	t.Helper()
	dir := t.TempDir()
	led, err := store.Open(context.Background(), store.Options{Ledger: filepath.Join(dir, "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	return newGWOn(t, led, filepath.Join(dir, "effects"), tweak)
}

func newGWOn(t *testing.T, led *store.Ledger, effects string, tweak func(*httpfront.Config, *wrap.Options)) *gw {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	g := &gw{t: t, effects: effects, led: led, log: &logBuf{}}
	scope := store.WrapScope([]string{"mcptest"}, "httpfront-test", nil, "")
	opt := wrap.Options{
		Command: []string{exe, "-test.run=^$"}, Env: mcptest.Env(effects, ""), Engine: led.Engine, Log: g.log,
		Grace: 300 * time.Millisecond, Shared: wrap.NewShared(),
	}
	cfg := httpfront.Config{Log: g.log, Loopback: true}
	if tweak != nil {
		tweak(&cfg, &opt)
	}
	cfg.NewSession = func(who httpfront.Caller) (*wrap.Proxy, error) {
		o := opt
		o.Scope = scope.ForPrincipal(who.Principal)
		p, err := wrap.New(o)
		if err == nil {
			g.mu.Lock()
			g.proxies = append(g.proxies, p)
			g.mu.Unlock()
		}
		return p, err
	}
	g.front, err = httpfront.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.front)
	g.url = srv.URL + "/mcp"
	t.Cleanup(func() {
		g.front.Close("test over")
		srv.Close()
		if t.Failed() {
			t.Logf("gateway log:\n%s", g.log.String())
		}
	})
	return g
}

// reply is one HTTP answer: status, headers and the JSON-RPC messages of its body (one for a
// JSON body, each event's data for SSE).
type reply struct {
	status int
	header http.Header
	msgs   []map[string]json.RawMessage
	raw    []string
}

func (r reply) last(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	if len(r.msgs) == 0 {
		t.Fatalf("no message in the answer (status %d)", r.status)
	}
	return r.msgs[len(r.msgs)-1]
}

type hdr map[string]string

func (g *gw) post(ctx context.Context, sid string, h hdr, body string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url, strings.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := gwClient.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	out := reply{status: resp.StatusCode, header: resp.Header}
	add := func(data []byte) error {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("not JSON: %q", data)
		}
		out.msgs = append(out.msgs, m)
		out.raw = append(out.raw, string(data))
		return nil
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				if err := add([]byte(d)); err != nil {
					return out, err
				}
			}
		}
		return out, sc.Err()
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return out, err
	}
	if len(bytes.TrimSpace(b)) > 0 {
		err = add(b)
	}
	return out, err
}

// deleteSession ends the session sid with a DELETE, which must answer 200.
func (g *gw) deleteSession(t *testing.T, sid string) {
	t.Helper()
	g.deleteSessionAs(t, sid, nil)
}

// deleteSessionAs is deleteSession with the headers h (a principal's Authorization).
func (g *gw) deleteSessionAs(t *testing.T, sid string, h hdr) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, g.url, nil)
	req.Header.Set("Mcp-Session-Id", sid)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := gwClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: status %d", resp.StatusCode)
	}
}

func (g *gw) mustPost(sid string, h hdr, body string) reply {
	g.t.Helper()
	r, err := g.post(context.Background(), sid, h, body)
	if err != nil {
		g.t.Fatal(err)
	}
	return r
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"httpfront-test","version":"1"}}}`

// open initializes a session and returns its id.
func (g *gw) open(h hdr) string {
	g.t.Helper()
	r := g.mustPost("", h, initBody)
	sid := r.header.Get("Mcp-Session-Id")
	if r.status != http.StatusOK || sid == "" {
		g.t.Fatalf("initialize: status %d, session %q, body %v", r.status, sid, r.raw)
	}
	if r := g.mustPost(sid, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); r.status != http.StatusAccepted {
		g.t.Fatalf("initialized: status %d", r.status)
	}
	return sid
}

func call(id int, tool, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, tool, args)
}

func resultText(t *testing.T, m map[string]json.RawMessage) string {
	t.Helper()
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := json.Unmarshal(m["result"], &r); err != nil || len(r.Content) == 0 {
		t.Fatalf("not a tool result: %s", m["result"])
	}
	return r.Content[0].Text
}

func TestSessionLifecycle(t *testing.T) {
	g := newGW(t, nil)
	sid := g.open(nil)
	r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if got := string(r.last(t)["result"]); got != mcptest.ToolsList {
		t.Fatalf("tools/list not byte for byte:\n got %s\nwant %s", got, mcptest.ToolsList)
	}
	if r := g.mustPost("", nil, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); r.status != http.StatusBadRequest {
		t.Fatalf("no session id: status %d, want 400", r.status)
	}
	if r := g.mustPost("nosuch", nil, `{"jsonrpc":"2.0","id":3,"method":"tools/list"}`); r.status != http.StatusNotFound {
		t.Fatalf("unknown session: status %d, want 404", r.status)
	}
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":4,"method":"tools/list"`); r.status != http.StatusBadRequest || !strings.Contains(r.raw[0], "-32700") {
		t.Fatalf("malformed JSON: status %d %v, want 400 with a parse error", r.status, r.raw)
	}
	g.deleteSession(t, sid)
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`); r.status != http.StatusNotFound {
		t.Fatalf("deleted session: status %d, want 404", r.status)
	}
}

// Identical calls from two sessions (two children) of one principal run once.
func TestDuplicatesAcrossSessionsRunOnce(t *testing.T) {
	g := newGW(t, nil)
	a, b := g.open(nil), g.open(nil)
	var wg sync.WaitGroup
	texts := make([]string, 6)
	for i := range texts {
		sid := a
		if i%2 == 1 {
			sid = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := g.post(context.Background(), sid, nil, call(10+i, "slow", `{"ms":300,"tag":"across"}`))
			if err != nil {
				t.Error(err)
				return
			}
			texts[i] = resultText(t, r.last(t))
		}()
	}
	wg.Wait()
	if n := len(mcptest.Effects(g.effects)); n != 1 {
		t.Fatalf("%d executions across two sessions, want 1", n)
	}
	for _, x := range texts[1:] {
		if x != texts[0] {
			t.Fatalf("answers differ: %q vs %q", x, texts[0])
		}
	}
}

// A response stream cut after the call was forwarded is not a failure: the call finishes,
// its outcome is recorded, and the client's re-sent call (a new JSON-RPC id) receives it.
func TestBrokenStreamThenResendRunsOnce(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid := g.open(nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := g.post(ctx, sid, nil, call(20, "slow", `{"ms":1500,"tag":"cut"}`))
		done <- err
	}()
	for !strings.Contains(g.log.String(), "slow tag=cut started") {
		time.Sleep(20 * time.Millisecond)
	}
	cancel() // the stream breaks mid-call
	<-done
	r := g.mustPost(sid, nil, call(21, "slow", `{"ms":1500,"tag":"cut"}`))
	text := resultText(t, r.last(t))
	if !strings.HasPrefix(text, "slow done n=1 ") {
		t.Fatalf("re-sent call answered %q, want the first execution's result", text)
	}
	if n := len(mcptest.Effects(g.effects)); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

func TestOriginAndHost(t *testing.T) {
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.AllowOrigins = []string{"https://app.example"} })
	if r := g.mustPost("", hdr{"Origin": "https://evil.example"}, initBody); r.status != http.StatusForbidden {
		t.Fatalf("foreign Origin: status %d, want 403", r.status)
	}
	if r := g.mustPost("", hdr{"Origin": "https://app.example"}, initBody); r.status != http.StatusOK {
		t.Fatalf("allowed Origin: status %d, want 200", r.status)
	}
	if r := g.mustPost("", hdr{"Origin": "http://localhost:3000"}, initBody); r.status != http.StatusOK {
		t.Fatalf("loopback Origin on a loopback listener: status %d, want 200", r.status)
	}
	req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(initBody))
	req.Host = "rebound.example:80" // a DNS name that points at 127.0.0.1
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	resp, err := gwClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("non-loopback Host: status %d, want 403", resp.StatusCode)
	}
}

// Keys name principals; a session belongs to its principal; identical calls of two principals
// are two actions, of one principal one.
func TestKeysAndPrincipals(t *testing.T) {
	alice, bob := "alice-token-0123456789", "bob-token-0123456789ab"
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) {
		c.Keys = map[string]string{alice: "alice", bob: "bob"}
	})
	if r := g.mustPost("", nil, initBody); r.status != http.StatusUnauthorized {
		t.Fatalf("no key: status %d, want 401", r.status)
	}
	if r := g.mustPost("", hdr{"Authorization": "Bearer wrong-token-000000000"}, initBody); r.status != http.StatusUnauthorized {
		t.Fatalf("wrong key: status %d, want 401", r.status)
	}
	ah, bh := hdr{"Authorization": "Bearer " + alice}, hdr{"Authorization": "Bearer " + bob}
	as, bs := g.open(ah), g.open(bh)
	// The scheme's name is case-insensitive: the same key, the same principal and session.
	if r := g.mustPost(as, hdr{"Authorization": "bearer " + alice}, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); r.status != http.StatusOK {
		t.Fatalf("alice's key under the scheme name %q: status %d, want 200", "bearer", r.status)
	}
	if r := g.mustPost(as, bh, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); r.status != http.StatusNotFound {
		t.Fatalf("bob using alice's session: status %d, want 404", r.status)
	}
	for i, s := range []struct {
		sid string
		h   hdr
	}{{as, ah}, {as, ah}, {bs, bh}, {bs, bh}} {
		r := g.mustPost(s.sid, s.h, call(30+i, "charge", `{"amount":7}`))
		if r.status != http.StatusOK {
			t.Fatalf("call %d: status %d", i, r.status)
		}
	}
	if n := len(mcptest.Effects(g.effects)); n != 2 {
		t.Fatalf("%d executions for two principals' identical calls (twice each), want 2", n)
	}
	if strings.Contains(g.log.String(), alice) || strings.Contains(g.log.String(), bob) {
		t.Fatal("a key reached the log")
	}
}

// Progress notifications travel on the stream of the request that asked for them, before its
// result; a request of the server to the client (roots/list) reaches the client on the open
// request stream and its answer, POSTed back, completes the call.
func TestStreamsCarryProgressAndServerRequests(t *testing.T) {
	g := newGW(t, nil)
	sid := g.open(nil)
	r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":40,"method":"tools/call","params":{"name":"progress","arguments":{"n":3},"_meta":{"progressToken":"tok-1"}}}`)
	if len(r.msgs) != 4 {
		t.Fatalf("got %d messages on the stream, want 3 progress + the result: %v", len(r.msgs), r.raw)
	}
	for _, m := range r.msgs[:3] {
		if string(m["method"]) != `"notifications/progress"` {
			t.Fatalf("not progress before the result: %v", r.raw)
		}
	}
	if string(r.msgs[3]["id"]) != "40" {
		t.Fatalf("last message is not the response: %v", r.raw)
	}

	// ask: the server sends roots/list to the client during the call.
	req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(call(41, "ask", `{}`)))
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := gwClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var final string
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if err := json.Unmarshal([]byte(d), &m); err != nil {
			t.Fatal(err)
		}
		if m.Method == "roots/list" {
			ans := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"roots":[{"uri":"file:///tmp/x"}]}}`, m.ID)
			if r := g.mustPost(sid, nil, ans); r.status != http.StatusAccepted {
				t.Fatalf("posting the answer: status %d", r.status)
			}
			continue
		}
		final = d
	}
	if !strings.Contains(final, `client said:`) || !strings.Contains(final, `file:///tmp/x`) {
		t.Fatalf("the call did not get the client's answer: %s", final)
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) { c.MaxSessions = 1 })
	sid := g.open(nil)
	if r := g.mustPost("", nil, initBody); r.status != http.StatusServiceUnavailable {
		t.Fatalf("session beyond --max-sessions: status %d, want 503", r.status)
	}
	big := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"` + strings.Repeat("x", wrap.MaxMessage) + `"}}}`
	if r := g.mustPost(sid, nil, big); r.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("huge body: status %d, want 413", r.status)
	}
	if r := g.mustPost(sid, hdr{"MCP-Protocol-Version": "banana"}, `{"jsonrpc":"2.0","id":3,"method":"ping"}`); r.status != http.StatusBadRequest {
		t.Fatalf("bad MCP-Protocol-Version: status %d, want 400", r.status)
	}
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":4,"method":"ping"}`); r.status != http.StatusOK {
		t.Fatalf("the session survived bad input: status %d", r.status)
	}
}

// A gateway that stops with a fenced call still running records it as unknown: the same
// call through a new gateway on the same ledger is refused, not run again.
func TestStopRecordsUnknown(t *testing.T) {
	t.Parallel()
	g := newGW(t, nil)
	sid := g.open(nil)
	done := make(chan reply, 1)
	go func() {
		r, _ := g.post(context.Background(), sid, nil, call(50, "slow", `{"ms":5000,"tag":"stop"}`))
		done <- r
	}()
	for !strings.Contains(g.log.String(), "slow tag=stop started") {
		time.Sleep(20 * time.Millisecond)
	}
	g.front.Close("test stops the gateway")
	first := <-done
	if len(first.msgs) == 0 || !strings.Contains(first.raw[len(first.raw)-1], "unknown") {
		t.Fatalf("the abandoned call was answered %v", first.raw)
	}
	g2 := newGWOn(t, g.led, g.effects, nil)
	r := g2.mustPost(g2.open(nil), nil, call(51, "slow", `{"ms":5000,"tag":"stop"}`))
	if !strings.Contains(r.raw[len(r.raw)-1], "prior_failure") {
		t.Fatalf("the same call after the stop was answered %v, want a prior_failure refusal", r.raw)
	}
	// The child was stopped mid-call, so the effect is not recorded by the server: what
	// matters is that it was not started a second time.
	if strings.Count(g2.log.String(), "slow tag=stop started") != 0 {
		t.Fatal("the call ran again after the stop")
	}
}

// A request the agent cancels gets no response (MCP), and its HTTP response ends rather than
// staying open for the rest of the session.
func TestCancelledRequestEndsItsStream(t *testing.T) {
	g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) { o.Pass = []string{"slow"} })
	sid := g.open(nil)
	done := make(chan reply, 1)
	go func() {
		r, err := g.post(context.Background(), sid, nil, call(60, "slow", `{"ms":30000,"tag":"cancel"}`))
		if err != nil {
			t.Error(err)
		}
		done <- r
	}()
	for !strings.Contains(g.log.String(), "slow tag=cancel started") {
		time.Sleep(20 * time.Millisecond)
	}
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":60,"reason":"user gave up"}}`); r.status != http.StatusAccepted {
		t.Fatalf("cancel: status %d", r.status)
	}
	select {
	case r := <-done:
		for _, m := range r.msgs {
			if string(m["id"]) == "60" {
				t.Fatalf("a cancelled request was answered: %v", r.raw)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled request's stream stayed open")
	}
}
