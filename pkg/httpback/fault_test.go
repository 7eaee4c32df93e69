package httpback

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// fake is a Streamable HTTP MCP server for fault tests: it handles initialize and
// notifications itself and hands every other request to call.
type fake struct {
	t        *testing.T
	mu       sync.Mutex
	sid      string
	posts    map[string]int         // method -> POSTs seen
	notes    []*jsonrpc.Message     // notifications received
	headers  map[string]http.Header // method -> headers of its last POST
	deletes  int
	gets     []http.Header
	lost     atomic.Bool // answer 404 to the current session id
	call     func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message)
	getReply func(w http.ResponseWriter, r *http.Request) // nil: 405
	// initResult replaces the initialize result, when set.
	initResult string
	// responses receives the client's answers to server requests.
	responses chan *jsonrpc.Message
}

func newFake(t *testing.T) (*fake, *httptest.Server) {
	f := &fake{t: t, sid: "s1", posts: map[string]int{}, headers: map[string]http.Header{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		f.mu.Lock()
		f.gets = append(f.gets, r.Header.Clone())
		g := f.getReply
		f.mu.Unlock()
		if g == nil {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		g(w, r)
		return
	case http.MethodDelete:
		f.mu.Lock()
		f.deletes++
		f.mu.Unlock()
		return
	}
	body, _ := io.ReadAll(r.Body)
	m, err := jsonrpc.Parse(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	key := m.Method
	if key == "" {
		key = "response"
	}
	f.mu.Lock()
	f.posts[key]++
	f.headers[key] = r.Header.Clone()
	sid := f.sid
	if m.IsNotification() {
		f.notes = append(f.notes, m)
	}
	f.mu.Unlock()
	if m.Method == "initialize" {
		f.mu.Lock()
		if f.lost.Load() {
			f.sid += "x"
			f.lost.Store(false)
		}
		sid = f.sid
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Mcp-Session-Id", sid)
		res := `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}`
		if f.initResult != "" {
			res = f.initResult
		}
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(res)))
		return
	}
	if r.Header.Get("Mcp-Session-Id") != sid || f.lost.Load() {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if !m.IsRequest() {
		if m.IsResponse() && f.responses != nil {
			f.responses <- m
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	f.mu.Lock()
	call := f.call
	f.mu.Unlock()
	call(w, r, m)
}

func (f *fake) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.posts[method]
}

func writeEvent(w io.Writer, id string, msg []byte) {
	if id != "" {
		fmt.Fprintf(w, "id: %s\n", id)
	}
	fmt.Fprintf(w, "data: %s\n\n", msg)
	w.(http.Flusher).Flush()
}

func upstream(t *testing.T, url string, cfg Config) *Upstream {
	cfg.URL = url
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	u := NewUpstream(cfg)
	t.Cleanup(func() { u.Kill() })
	return u
}

func session(t *testing.T, u *Upstream) *Session {
	s, err := u.Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mayHaveRun(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("call succeeded; want a may-have-run error")
	}
	if errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("error says not sent, but the request reached the server: %v", err)
	}
	var re *jsonrpc.Error
	if errors.As(err, &re) {
		t.Fatalf("error is a JSON-RPC answer, but the server answered none: %v", err)
	}
}

func TestConnectionRefusedIsNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	u := upstream(t, "http://user:pw@"+addr+"/mcp?token=sekrit", Config{})
	_, err = u.Session(context.Background())
	if !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("Session against a closed port: %v; want ErrNotSent", err)
	}
	if strings.Contains(err.Error(), "sekrit") || strings.Contains(err.Error(), "pw") {
		t.Fatalf("the error shows the URL's secrets: %v", err)
	}

	// A live session whose server went away: the call never reached it.
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
	}
	u = upstream(t, srv.URL, Config{Client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	s := session(t, u)
	srv.Close()
	_, err = s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
	if !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("Call against a closed port: %v; want ErrNotSent", err)
	}
}

// A server that reads the whole request and then drops the connection: the call may have
// run, and Go's transport must not send it a second time.
func TestBodyReadThenDroppedIsSentOnce(t *testing.T) {
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.(*net.TCPConn).SetLinger(0)
		conn.Close()
	}
	// A client's Idempotency-Key would make Go's transport count the POST as replayable.
	u := upstream(t, srv.URL, Config{Header: http.Header{"Idempotency-Key": {"k1"}}})
	s := session(t, u)
	_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay","arguments":{"cents":100}}`))
	mayHaveRun(t, err)
	if n := f.count("tools/call"); n != 1 {
		t.Fatalf("the server saw the call %d times; want exactly 1", n)
	}
	// The same through a reused keep-alive connection (a warm pool is where a transport
	// would be tempted to replay).
	f.mu.Lock()
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		if m.Method == "ping" {
			w.Header().Set("Content-Type", "application/json")
			w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
			return
		}
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}
	f.mu.Unlock()
	if _, err := s.Call(context.Background(), "ping", nil); err != nil {
		t.Fatal(err)
	}
	_, err = s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
	mayHaveRun(t, err)
	if n := f.count("tools/call"); n != 2 {
		t.Fatalf("the server saw %d tools/call POSTs after two calls; want 2", n)
	}
}

func TestServerErrorsMayHaveRun(t *testing.T) {
	f, srv := newFake(t)
	u := upstream(t, srv.URL, Config{})
	s := session(t, u)
	for _, code := range []int{500, 502, 503, 429, 400} {
		f.mu.Lock()
		f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			w.Write(jsonrpc.ErrorResponse(m.ID, &jsonrpc.Error{Code: -32603, Message: "Internal server error"}))
		}
		f.mu.Unlock()
		_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
		mayHaveRun(t, err)
		var se *StatusError
		if !errors.As(err, &se) || se.Status != code || se.RPC == nil {
			t.Fatalf("HTTP %d: %v; want a *StatusError with the body's error", code, err)
		}
	}
	// 400 ended the session (servers built on the SDK's example answer it to an unknown
	// session id); the next Session initializes again.
	if u.Current() != nil {
		t.Fatal("the session is still current after HTTP 400")
	}
	if s2 := session(t, u); s2 == s || u.Starts() != 2 {
		t.Fatalf("no new session after HTTP 400 (starts %d)", u.Starts())
	}
}

func TestJSONRPCErrorAnswer(t *testing.T) {
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.ErrorResponse(m.ID, &jsonrpc.Error{Code: -32602, Message: "unknown tool"}))
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"nope"}`))
	var re *jsonrpc.Error
	if !errors.As(err, &re) || re.Code != -32602 || errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("got %v; want the server's JSON-RPC error", err)
	}
}

func TestSSECutMayHaveRun(t *testing.T) {
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "", jsonrpc.Notification("notifications/progress", json.RawMessage(`{"progressToken":1,"progress":1}`)))
		fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"id\":")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // cut the connection mid-event
	}
	var got atomic.Int32
	s := session(t, upstream(t, srv.URL, Config{OnNotification: func(string, json.RawMessage) { got.Add(1) }}))
	_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
	mayHaveRun(t, err)
	if f.count("tools/call") != 1 {
		t.Fatalf("tools/call POSTed %d times", f.count("tools/call"))
	}
	// A stream that ends cleanly before the response is no better.
	f.mu.Lock()
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "", jsonrpc.Notification("notifications/progress", json.RawMessage(`{"progressToken":1,"progress":1}`)))
	}
	f.mu.Unlock()
	_, err = s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
	mayHaveRun(t, err)
	if !strings.Contains(err.Error(), "before the response") {
		t.Fatalf("error does not say the stream ended before the response: %v", err)
	}
}

// With event ids, a cut stream is resumed once with GET and Last-Event-ID; nothing is POSTed
// again.
func TestSSEResumeOnce(t *testing.T) {
	f, srv := newFake(t)
	resumes := f.resumedAfterE1(func(_ int32, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "e2", jsonrpc.Notification("notifications/progress", json.RawMessage(`{"progressToken":1,"progress":2}`)))
		writeEvent(w, "e3", jsonrpc.Response(json.RawMessage(`2`), json.RawMessage(`{"content":[],"ok":true}`)))
	})
	var mu sync.Mutex
	var seen []string
	s := session(t, upstream(t, srv.URL, Config{OnNotification: func(_ string, p json.RawMessage) {
		mu.Lock()
		seen = append(seen, string(p))
		mu.Unlock()
	}}))
	res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `{"content":[],"ok":true}` || resumes.Load() != 1 || f.count("tools/call") != 1 {
		t.Fatalf("result %s, resumes %d, POSTs %d", res, resumes.Load(), f.count("tools/call"))
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("notifications before the result: %q; want both progress notifications", seen)
	}
}

func TestOrderNotificationsBeforeResult(t *testing.T) {
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 1; i <= 50; i++ {
			writeEvent(w, "", jsonrpc.Notification("notifications/progress", json.RawMessage(fmt.Sprintf(`{"progressToken":"t","progress":%d}`, i))))
		}
		writeEvent(w, "", jsonrpc.Response(m.ID, json.RawMessage(`{"content":[ ],"x" : 1}`)))
	}
	var mu sync.Mutex
	var seen []string
	s := session(t, upstream(t, srv.URL, Config{OnNotification: func(_ string, p json.RawMessage) {
		mu.Lock()
		seen = append(seen, string(p))
		mu.Unlock()
	}}))
	res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"x"}`))
	mu.Lock()
	n := len(seen)
	last := ""
	if n > 0 {
		last = seen[n-1]
	}
	mu.Unlock()
	if err != nil || string(res) != `{"content":[ ],"x" : 1}` {
		t.Fatalf("result %s, %v; want the exact bytes", res, err)
	}
	if n != 50 || last != `{"progressToken":"t","progress":50}` {
		t.Fatalf("%d notifications delivered before Call returned (last %s); want 50 in order", n, last)
	}
}

func TestHugeResponseRefused(t *testing.T) {
	old := maxMessage
	maxMessage = 1 << 20
	t.Cleanup(func() { maxMessage = old })
	huge := `{"content":[{"type":"text","text":"` + strings.Repeat("a", 2<<20) + `"}]}`
	f, srv := newFake(t)
	s := session(t, upstream(t, srv.URL, Config{}))
	for _, mode := range []string{"json", "sse"} {
		f.mu.Lock()
		f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			if mode == "json" {
				w.Header().Set("Content-Type", "application/json")
				w.Write(jsonrpc.Response(m.ID, json.RawMessage(huge)))
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "", jsonrpc.Response(m.ID, json.RawMessage(huge)))
		}
		f.mu.Unlock()
		_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"big"}`))
		mayHaveRun(t, err)
		if !errors.Is(err, ErrTooLarge) {
			t.Fatalf("%s: %v; want ErrTooLarge", mode, err)
		}
	}
	// The session still works.
	f.mu.Lock()
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
	}
	f.mu.Unlock()
	if _, err := s.Call(context.Background(), "ping", nil); err != nil {
		t.Fatal(err)
	}
}

func TestCancelSendsNotificationsCancelled(t *testing.T) {
	f, srv := newFake(t)
	arrived := make(chan json.RawMessage, 1)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		arrived <- m.ID
		<-r.Context().Done()
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"slow"}`))
		done <- err
	}()
	id := <-arrived
	cancel(&mcpstdio.CancelReason{Reason: "user hit stop"})
	if err := <-done; !errors.Is(err, context.Canceled) || errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("Call after cancel: %v; want context.Canceled", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var found bool
	for _, n := range f.notes {
		if n.Method == "notifications/cancelled" {
			var p struct {
				RequestID json.RawMessage `json:"requestId"`
				Reason    string          `json:"reason"`
			}
			json.Unmarshal(n.Params, &p)
			found = string(p.RequestID) == string(id) && p.Reason == "user hit stop"
		}
	}
	if !found {
		t.Fatalf("no notifications/cancelled for request %s among %d notifications", id, len(f.notes))
	}
}

func TestSessionLost404(t *testing.T) {
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
	}
	u := upstream(t, srv.URL, Config{})
	s := session(t, u)
	f.lost.Store(true)
	_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
	if !errors.Is(err, mcpstdio.ErrNotSent) || !errors.Is(err, ErrSessionLost) {
		t.Fatalf("call on a session the server forgot: %v; want ErrNotSent and ErrSessionLost", err)
	}
	if u.Current() != nil {
		t.Fatal("a lost session is still current")
	}
	s2 := session(t, u)
	if s2.ID() != "s1x" {
		t.Fatalf("new session id %q; want s1x", s2.ID())
	}
	if _, err := s2.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`)); err != nil {
		t.Fatal(err)
	}
}

func TestHeadersAndDelete(t *testing.T) {
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{"tools":[]}`)))
	}
	var logs bytes.Buffer
	h := http.Header{"Authorization": {"Bearer sekrit-token"}, "Idempotency-Key": {"k"}}
	u := upstream(t, srv.URL+"?token=sekrit-token", Config{Header: h, Log: &logs})
	s := session(t, u)
	if _, err := s.Call(context.Background(), "tools/list", nil); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	ih, lh := f.headers["initialize"], f.headers["tools/list"]
	f.mu.Unlock()
	if ih.Get("Mcp-Session-Id") != "" || ih.Get("Mcp-Protocol-Version") != "" {
		t.Fatalf("initialize carried session headers: %v", ih)
	}
	for _, hh := range []http.Header{ih, lh} {
		if hh.Get("Authorization") != "Bearer sekrit-token" || hh.Get("Idempotency-Key") != "" ||
			hh.Get("Accept") != "application/json, text/event-stream" {
			t.Fatalf("headers %v", hh)
		}
	}
	if lh.Get("Mcp-Session-Id") != "s1" || lh.Get("Mcp-Protocol-Version") != "2025-06-18" {
		t.Fatalf("tools/list headers %v; want the session id and the negotiated version", lh)
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	deletes := f.deletes
	f.mu.Unlock()
	if deletes != 1 {
		t.Fatalf("%d DELETEs on Close; want 1", deletes)
	}
	if _, err := u.Session(context.Background()); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("Session after Close: %v", err)
	}
	if _, err := s.Call(context.Background(), "tools/list", nil); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("Call after Close: %v", err)
	}
	if strings.Contains(logs.String(), "sekrit") {
		t.Fatalf("a secret reached the log: %s", logs.String())
	}
}

func TestBadConfig(t *testing.T) {
	for _, cfg := range []Config{{URL: "ftp://x/mcp"}, {URL: "/mcp"}, {URL: "http://127.0.0.1:1/mcp", Init: json.RawMessage(`[1]`)}} {
		u := upstream(t, cfg.URL, cfg)
		if _, err := u.Session(context.Background()); err == nil || !errors.Is(err, mcpstdio.ErrNotSent) {
			t.Fatalf("%+v: %v; want a clear not-sent error", cfg, err)
		}
	}
}

func TestServerRequestAnswered(t *testing.T) {
	f, srv := newFake(t)
	f.responses = make(chan *jsonrpc.Message, 1)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "", jsonrpc.Request(json.RawMessage(`"q1"`), "elicitation/create", json.RawMessage(`{"message":"sure?"}`)))
		select {
		case a := <-f.responses:
			if string(a.ID) != `"q1"` || string(a.Result) != `{"action":"accept","content":{}}` {
				t.Errorf("answer to the elicitation: id %s result %s", a.ID, a.Result)
			}
		case <-r.Context().Done():
			return
		}
		writeEvent(w, "", jsonrpc.Response(m.ID, json.RawMessage(`{"done":true}`)))
	}
	s := session(t, upstream(t, srv.URL, Config{OnRequest: func(ctx context.Context, method string, p json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"action":"accept","content":{}}`), nil
	}}))
	res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"ask"}`))
	if err != nil || string(res) != `{"done":true}` {
		t.Fatalf("%s %v", res, err)
	}
}

// The server's own messages arrive on the GET stream; 405 (the fake's default elsewhere)
// means none is offered and nothing is retried.
func TestGETStream(t *testing.T) {
	f, srv := newFake(t)
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "g1", jsonrpc.Notification("notifications/tools/list_changed", nil))
		<-r.Context().Done()
	}
	got := make(chan string, 1)
	u := upstream(t, srv.URL, Config{OnNotification: func(method string, _ json.RawMessage) { got <- method }})
	session(t, u)
	if m := <-got; m != "notifications/tools/list_changed" {
		t.Fatalf("got %s", m)
	}
	f.mu.Lock()
	h := f.gets[0]
	f.mu.Unlock()
	if h.Get("Mcp-Session-Id") != "s1" || h.Get("Accept") != "text/event-stream" {
		t.Fatalf("GET headers %v", h)
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
}

// A 400 or 404 to one request retires the session for new requests, but a call already
// under way on it still gets its answer: the server may be running it.
func TestRetiredSessionKeepsCallsInFlight(t *testing.T) {
	f, srv := newFake(t)
	started, release := make(chan struct{}), make(chan struct{})
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		var p struct{ Name string }
		json.Unmarshal(m.Params, &p)
		if p.Name == "bad" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		close(started)
		<-release
		writeEvent(w, "", jsonrpc.Response(m.ID, json.RawMessage(`{"paid":true}`)))
	}
	u := upstream(t, srv.URL, Config{})
	s := session(t, u)
	done := make(chan error, 1)
	var res json.RawMessage
	go func() {
		var err error
		res, err = s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
		done <- err
	}()
	<-started
	_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"bad"}`))
	mayHaveRun(t, err)
	if u.Current() != nil {
		t.Fatal("the session is still current after HTTP 400")
	}
	if _, err := s.Call(context.Background(), "ping", nil); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("a new call on the retired session: %v; want ErrNotSent", err)
	}
	session(t, u) // re-initializes; the old session drains
	close(release)
	if err := <-done; err != nil || string(res) != `{"paid":true}` {
		t.Fatalf("the call in flight: %s, %v; want its answer", res, err)
	}
	<-s.bg.Done() // stopped once drained
}

// The server cancels its own request to the client: the handler's context ends with the
// server's reason, no answer is sent, and the notification goes no further.
func TestServerCancelsItsRequest(t *testing.T) {
	f, srv := newFake(t)
	f.responses = make(chan *jsonrpc.Message, 1)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "", jsonrpc.Request(json.RawMessage(`"q1"`), "elicitation/create", json.RawMessage(`{"message":"sure?"}`)))
		writeEvent(w, "", jsonrpc.Notification("notifications/cancelled", json.RawMessage(`{"requestId":"q1","reason":"took too long"}`)))
		writeEvent(w, "", jsonrpc.Response(m.ID, json.RawMessage(`{"done":true}`)))
	}
	cause := make(chan error, 1)
	var notified atomic.Int32
	s := session(t, upstream(t, srv.URL, Config{
		OnRequest: func(ctx context.Context, method string, p json.RawMessage) (json.RawMessage, error) {
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return json.RawMessage(`{"action":"accept","content":{}}`), nil
		},
		OnNotification: func(method string, p json.RawMessage) { notified.Add(1) },
	}))
	if _, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"ask"}`)); err != nil {
		t.Fatal(err)
	}
	var why *mcpstdio.CancelReason
	if err := <-cause; !errors.As(err, &why) || why.Reason != "took too long" {
		t.Fatalf("the handler ended with %v, want the server's cancellation", err)
	}
	if n := notified.Load(); n != 0 {
		t.Fatalf("the server's notifications/cancelled was passed on (%d)", n)
	}
	select {
	case a := <-f.responses:
		t.Fatalf("a cancelled request was answered: %s", a.Result)
	case <-time.After(300 * time.Millisecond):
	}
}

// 401 and 403 are decided before any MCP handling: a definite refusal, not "may have run".
func TestAuthRefusalIsDefinite(t *testing.T) {
	for _, code := range []int{http.StatusUnauthorized, http.StatusForbidden} {
		f, srv := newFake(t)
		f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) { w.WriteHeader(code) }
		s := session(t, upstream(t, srv.URL, Config{}))
		_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"x"}`))
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) || errors.Is(err, mcpstdio.ErrNotSent) {
			t.Fatalf("HTTP %d: %v, want a JSON-RPC refusal", code, err)
		}
	}
}

// An event naming the call's id, without a method, that is not a valid response (here an
// "error" that is not an object) is the server's answer: the call ends at once as may have
// run, even though the stream stays open and carries event ids (no resume either). Before,
// the event was logged and skipped and the call waited for the stream to end.
func TestInvalidAnswerEndsTheCall(t *testing.T) {
	f, srv := newFake(t)
	release := make(chan struct{})
	defer close(release)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "e1", []byte(`{"jsonrpc":"2.0","id":5,"error":"x"}`)) // another id: skipped
		writeEvent(w, "e2", []byte(`{"jsonrpc":"2.0","id":`+string(m.ID)+`,"method":"x","error":"x"}`))
		writeEvent(w, "e3", []byte(`{"jsonrpc":"2.0","id":`+string(m.ID)+`,"error":"x"}`))
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"pay"}`))
	if ctx.Err() != nil {
		t.Fatal("the call still waited after the server answered it with an invalid response")
	}
	mayHaveRun(t, err)
	if !strings.Contains(err.Error(), "not a valid JSON-RPC response") || !strings.Contains(err.Error(), `\"error\":\"x\"`) {
		t.Fatalf("error does not name the invalid answer: %v", err)
	}
	f.mu.Lock()
	resumes := 0
	for _, h := range f.gets {
		if h.Get("Last-Event-Id") != "" {
			resumes++
		}
	}
	f.mu.Unlock()
	if resumes != 0 || f.count("tools/call") != 1 {
		t.Fatalf("resumes %d (want none), POSTs %d", resumes, f.count("tools/call"))
	}
}

// A server cannot make the session keep without bound requests the client is slow to answer
// (or never answers): beyond mcpstdio.MaxInbound waiting at once, each is refused with an
// error at once. Before, each one kept a goroutine and an entry (and, in wrap, another
// waiting for the agent) for as long as the client did not answer.
func TestServerRequestsWaitingAreBounded(t *testing.T) {
	const n = mcpstdio.MaxInbound + 76
	f, srv := newFake(t)
	f.responses = make(chan *jsonrpc.Message, n)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			writeEvent(w, "", jsonrpc.Request(json.RawMessage(fmt.Sprintf(`"q%d"`, i)), "roots/list", json.RawMessage(`{}`)))
		}
		writeEvent(w, "", jsonrpc.Response(m.ID, json.RawMessage(`{"done":true}`)))
	}
	release := make(chan struct{})
	defer close(release) // before the Cleanup's Kill: the handlers end
	s := session(t, upstream(t, srv.URL, Config{OnRequest: func(ctx context.Context, method string, p json.RawMessage) (json.RawMessage, error) {
		select { // a client that does not answer
		case <-release:
		case <-ctx.Done():
		}
		return json.RawMessage(`{"roots":[]}`), nil
	}}))
	// The response is handed over once everything before it was delivered: each request
	// was taken or refused by then.
	if _, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"ask"}`)); err != nil {
		t.Fatal(err)
	}
	waiting := s.inbound.Len()
	if waiting != mcpstdio.MaxInbound || len(f.responses) != n-mcpstdio.MaxInbound {
		t.Fatalf("%d of the server's %d requests waiting and %d answered, want %d and %d", waiting, n, len(f.responses), mcpstdio.MaxInbound, n-mcpstdio.MaxInbound)
	}
	for range n - mcpstdio.MaxInbound {
		if a := <-f.responses; a.Error == nil {
			t.Fatalf("a request beyond the bound was answered %s, want an error", a.Result)
		}
	}
}

// TestCancellationOfAReusedID: a server may send a request under the id of one still being
// answered (legally once it has the first one's answer, when our cleanup may not have run
// yet). The first one's end must leave the second cancellable: before, its cleanup removed
// the second's entry, and the server's cancellation of that id reached nothing.
func TestCancellationOfAReusedID(t *testing.T) {
	f, srv := newFake(t)
	f.responses = make(chan *jsonrpc.Message, 2)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "", jsonrpc.Request(json.RawMessage(`"same"`), "roots/list", json.RawMessage(`{"n":1}`)))
		writeEvent(w, "", jsonrpc.Request(json.RawMessage(`"same"`), "roots/list", json.RawMessage(`{"n":2}`)))
		<-f.responses // the first one's answer
		time.Sleep(100 * time.Millisecond)
		writeEvent(w, "", jsonrpc.Notification("notifications/cancelled", json.RawMessage(`{"requestId":"same","reason":"reused id"}`)))
		writeEvent(w, "", jsonrpc.Response(m.ID, json.RawMessage(`{"done":true}`)))
	}
	answer, cause := mcptest.ReuseAnswers()
	s := session(t, upstream(t, srv.URL, Config{OnRequest: answer}))
	if _, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"ask"}`)); err != nil {
		t.Fatal(err)
	}
	var why *mcpstdio.CancelReason
	if err := <-cause; !errors.As(err, &why) || why.Reason != "reused id" {
		t.Fatalf("the second request under a reused id ended with %v, want the server's cancellation", err)
	}
	deadline := time.Now().Add(5 * time.Second) // the second handler's end may still run
	for s.inbound.Len() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := s.inbound.Len(); n != 0 {
		t.Fatalf("%d requests still registered after both were answered", n)
	}
}

// A redirect to a tools/call is never followed: following a 301, 302 or 303 turns the POST
// into a GET of another URL, and a 307 or 308 asks for the body again. Each is returned as is,
// a *StatusError, so the call may have run; the redirect's target is never asked. A 408 is
// "may have run" too, and so is a 202 Accepted with no response to a request.
func TestRedirectsAndOtherStatusesMayHaveRun(t *testing.T) {
	var elsewhere atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":false}}`))
	}))
	t.Cleanup(target.Close)
	f, srv := newFake(t)
	u := upstream(t, srv.URL, Config{})
	for _, code := range []int{301, 302, 303, 307, 308, 408, 202} {
		f.mu.Lock()
		f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			if code/100 == 3 {
				w.Header().Set("Location", target.URL+"/mcp")
			}
			w.WriteHeader(code)
		}
		f.mu.Unlock()
		s := session(t, u)
		_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
		mayHaveRun(t, err)
		var se *StatusError
		if code != 202 && (!errors.As(err, &se) || se.Status != code) {
			t.Fatalf("HTTP %d: %v; want a *StatusError", code, err)
		}
		if n := elsewhere.Load(); n != 0 {
			t.Fatalf("HTTP %d: the redirect was followed (%d requests to its target)", code, n)
		}
	}
}

// cutAfterAnEvent answers a call with a stream that carries one event (id e1, a progress
// notification) and is then cut, before the response.
func cutAfterAnEvent(w http.ResponseWriter, _ *http.Request, _ *jsonrpc.Message) {
	w.Header().Set("Content-Type", "text/event-stream")
	writeEvent(w, "e1", jsonrpc.Notification("notifications/progress", json.RawMessage(`{"progressToken":1,"progress":1}`)))
	panic(http.ErrAbortHandler)
}

// resumedAfterE1 makes f a server that cuts each call's stream after its first event
// (cutAfterAnEvent) and answers the n-th GET that resumes it after e1 (n counted from 1) with
// resume; any other GET (the session's stream) is not offered (405). It returns the count of
// resuming GETs.
func (f *fake) resumedAfterE1(resume func(n int32, w http.ResponseWriter, r *http.Request)) *atomic.Int32 {
	var gets atomic.Int32
	f.call = cutAfterAnEvent
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-Id") != "e1" {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		resume(gets.Add(1), w, r)
	}
	return &gets
}

// holdQuiet opens an event stream and sends nothing on it until the client leaves.
func holdQuiet(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// TestAnswerUnderItsIDSpelledOtherwise: a server answers with the request's id, the same value
// (JSON-RPC), which a JSON library that reads every number as a double writes as 7.0 for 7;
// MCP's SDK clients compare ids as values and accept it. Compared by bytes, such an answer was
// "not the response" to the call, whose outcome was then unknown though the server answered
// it: every call of such a server was fenced for an operator.
func TestAnswerUnderItsIDSpelledOtherwise(t *testing.T) {
	f, srv := newFake(t)
	var sse atomic.Bool
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		id := append(json.RawMessage{}, m.ID...)
		if len(bytes.Trim(id, "-0123456789")) == 0 {
			id = append(id, ".0"...)
		}
		answer := jsonrpc.Response(id, json.RawMessage(`{"content":[{"type":"text","text":"paid"}]}`))
		if sse.Load() {
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "", answer)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	for _, stream := range []bool{false, true} {
		sse.Store(stream)
		res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
		if err != nil || !strings.Contains(string(res), "paid") {
			t.Fatalf("answered as SSE %v: %s, %v", stream, res, err)
		}
	}
}
