package httpback_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpback"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// fake is a scripted Streamable HTTP server: it answers initialize and notifications itself
// and hands every other request to call.
type fake struct {
	calls    atomic.Int32 // requests other than initialize seen (bodies read)
	cancels  atomic.Int32 // notifications/cancelled seen
	deletes  atomic.Int32
	sessions atomic.Int32
	call     func(w http.ResponseWriter, m *jsonrpc.Message)
	mu       sync.Mutex
	sid      string
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodDelete {
		f.deletes.Add(1)
		return
	}
	if r.Method == http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	body, _ := io.ReadAll(r.Body)
	m, err := jsonrpc.Parse(body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if m.Method == "initialize" {
		n := f.sessions.Add(1)
		f.mu.Lock()
		f.sid = fmt.Sprintf("s%d", n)
		sid := f.sid
		f.mu.Unlock()
		w.Header().Set("Mcp-Session-Id", sid)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"fake","version":"1"}}`)))
		return
	}
	f.mu.Lock()
	sid := f.sid
	f.mu.Unlock()
	if r.Header.Get("Mcp-Session-Id") != sid {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if !m.IsRequest() {
		if m.Method == "notifications/cancelled" {
			f.cancels.Add(1)
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	f.calls.Add(1)
	f.call(w, m)
}

func serve(t *testing.T, call func(w http.ResponseWriter, m *jsonrpc.Message)) (*fake, string) {
	f := &fake{call: call}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv.URL + "/mcp"
}

func session(t *testing.T, url string, cfg httpback.Config) (*httpback.Upstream, *httpback.Session) {
	t.Helper()
	cfg.URL = url
	u := httpback.NewUpstream(cfg)
	t.Cleanup(func() { u.Close() })
	s, err := u.Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return u, s
}

func call(s *httpback.Session) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.Call(ctx, "tools/call", json.RawMessage(`{"name":"charge","arguments":{"amount":1}}`))
}

func TestJSONAnswerIsReturnedByteForByte(t *testing.T) {
	const result = `{"content":[{"type":"text","text":"ok"}],  "structuredContent":{"big":12345678901234567890123}}`
	_, url := serve(t, func(w http.ResponseWriter, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(jsonrpc.Response(m.ID, json.RawMessage(result)))
	})
	_, s := session(t, url, httpback.Config{})
	res, err := call(s)
	if err != nil || string(res) != result {
		t.Fatalf("got %s %v, want the exact bytes %s", res, err, result)
	}
}

func TestRefusedConnectionIsNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	u := httpback.NewUpstream(httpback.Config{URL: "http://" + addr + "/mcp"})
	defer u.Close()
	if _, err := u.Session(context.Background()); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("connect to a closed port: %v, want ErrNotSent", err)
	}
	// A live session whose server went away: the call cannot be sent.
	f := &fake{call: func(w http.ResponseWriter, m *jsonrpc.Message) {}}
	srv := httptest.NewServer(f)
	_, s := session(t, srv.URL+"/mcp", httpback.Config{})
	srv.Close()
	if _, err := call(s); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("call to a server that is gone: %v, want ErrNotSent", err)
	}
	if f.calls.Load() != 0 {
		t.Fatal("the closed server saw the call")
	}
}

// The server reads the request and drops the connection without answering: the call may have
// run (not ErrNotSent), and it was sent exactly once: no retry.
func TestDroppedAfterReadIsMayHaveRunAndNotRetried(t *testing.T) {
	f, url := serve(t, func(w http.ResponseWriter, m *jsonrpc.Message) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("cannot hijack")
			return
		}
		c, _, err := hj.Hijack()
		if err == nil {
			c.Close()
		}
	})
	_, s := session(t, url, httpback.Config{})
	_, err := call(s)
	if err == nil || errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("dropped after the body was read: %v, want a may-have-run error", err)
	}
	if n := f.calls.Load(); n != 1 {
		t.Fatalf("the server saw the call %d times, want 1 (no retry)", n)
	}
}

func TestStatusesMeanWhatTheySay(t *testing.T) {
	for _, c := range []struct {
		status  int
		body    string
		notSent bool
		rpc     bool
	}{
		{500, "boom", false, false},
		{502, "", false, false},
		{408, "", false, false},
		{401, "", false, true},
		{400, `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"bad"}}`, false, true},
	} {
		_, url := serve(t, func(w http.ResponseWriter, m *jsonrpc.Message) {
			w.WriteHeader(c.status)
			_, _ = io.WriteString(w, c.body)
		})
		_, s := session(t, url, httpback.Config{})
		_, err := call(s)
		var rpc *jsonrpc.Error
		if err == nil || errors.Is(err, mcpstdio.ErrNotSent) != c.notSent || errors.As(err, &rpc) != c.rpc {
			t.Errorf("HTTP %d: %v (not sent %v, rpc %v)", c.status, err, errors.Is(err, mcpstdio.ErrNotSent), errors.As(err, &rpc))
		}
	}
}

// A 404 to the session id: the server does not know the session and ran nothing; the next
// Session is a new one.
func TestLostSessionIsNotSentAndReconnects(t *testing.T) {
	f, url := serve(t, func(w http.ResponseWriter, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
	})
	u, s := session(t, url, httpback.Config{})
	f.mu.Lock()
	f.sid = "forgotten"
	f.mu.Unlock()
	if _, err := call(s); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("404 to the session: %v, want ErrNotSent", err)
	}
	time.Sleep(httpback.RestartBackoff)
	s2, err := u.Session(context.Background())
	if err != nil || s2 == s || f.sessions.Load() != 2 {
		t.Fatalf("no new session: %v (sessions %d)", err, f.sessions.Load())
	}
	if _, err := call(s2); err != nil {
		t.Fatal(err)
	}
}

// Notifications and requests on the call's stream come before the response, in order; a
// request is answered by POST; a stream cut before the response may have run.
func TestStreamOrderRequestsAndCut(t *testing.T) {
	answered := make(chan string, 1)
	_, url := serve(t, func(w http.ResponseWriter, m *jsonrpc.Message) {
		if m.Method == "answer" {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		var p struct {
			Cut bool `json:"cut"`
		}
		_ = json.Unmarshal(m.Params, &p)
		for i := 1; i <= 3; i++ {
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", jsonrpc.Notification("notifications/progress", json.RawMessage(fmt.Sprintf(`{"progressToken":"t","progress":%d}`, i))))
		}
		fl.Flush()
		if p.Cut {
			return // the stream ends without the response
		}
		fmt.Fprintf(w, ": keep-alive\n\nevent: message\ndata: %s\n\n", jsonrpc.Request(json.RawMessage(`"srv-1"`), "roots/list", json.RawMessage(`{}`)))
		fl.Flush()
		fmt.Fprintf(w, "data: %s\n\n", jsonrpc.Response(m.ID, json.RawMessage(`{"done":true}`)))
	})
	var mu sync.Mutex
	var seen []string
	_, s := session(t, url, httpback.Config{
		OnNotification: func(method string, params json.RawMessage) {
			time.Sleep(20 * time.Millisecond) // a slow consumer must still be done before Call returns
			mu.Lock()
			seen = append(seen, string(params))
			mu.Unlock()
		},
		OnRequest: func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
			answered <- method
			return json.RawMessage(`{"roots":[]}`), nil
		},
	})
	res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"x"}`))
	if err != nil || string(res) != `{"done":true}` {
		t.Fatalf("%s %v", res, err)
	}
	mu.Lock()
	got := strings.Join(seen, " ")
	mu.Unlock()
	if got != `{"progressToken":"t","progress":1} {"progressToken":"t","progress":2} {"progressToken":"t","progress":3}` {
		t.Fatalf("notifications before the response, in order, delivered before Call returned: %s", got)
	}
	select {
	case m := <-answered:
		if m != "roots/list" {
			t.Fatal(m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server's request was not handed to OnRequest")
	}
	_, err = s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"x","cut":true}`))
	if err == nil || errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("a stream cut before the response: %v, want may-have-run", err)
	}
}

func TestHugeAnswerIsRefusedCleanly(t *testing.T) {
	_, url := serve(t, func(w http.ResponseWriter, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"x":"`)
		chunk := strings.Repeat("x", 1<<20)
		for i := 0; i < 65; i++ {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `"}}`)
	})
	_, s := session(t, url, httpback.Config{})
	if _, err := call(s); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("a 65 MiB answer: %v", err)
	}
}

// A caller that stops waiting: the server is told the request is cancelled.
func TestCancelSendsCancelled(t *testing.T) {
	release := make(chan struct{})
	f, url := serve(t, func(w http.ResponseWriter, m *jsonrpc.Message) {
		<-release
	})
	defer close(release)
	_, s := session(t, url, httpback.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for f.calls.Load() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
	}()
	if _, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"x"}`)); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.cancels.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if f.cancels.Load() != 1 {
		t.Fatal("the server was not sent notifications/cancelled")
	}
}

func TestCloseDeletesTheSession(t *testing.T) {
	f, url := serve(t, func(w http.ResponseWriter, m *jsonrpc.Message) {})
	u, _ := session(t, url, httpback.Config{})
	u.Close()
	if f.deletes.Load() != 1 {
		t.Fatal("Close did not DELETE the session")
	}
	if _, err := u.Session(context.Background()); !errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("Session after Close: %v", err)
	}
}

// The real server-everything (npm) in its Streamable HTTP mode: handshake, listing, a tool
// with progress notifications before its result, a server request (sampling) answered.
func TestRealServerEverything(t *testing.T) {
	bin, _ := filepath.Abs("../../.peers/node_modules/.bin/mcp-server-everything")
	if _, err := os.Stat(bin); err != nil {
		t.Skip("skipping: @modelcontextprotocol/server-everything is not installed; run scripts/install-peers")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on port") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatal("server-everything did not start")
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
	var mu sync.Mutex
	var progress int
	sampled := make(chan struct{}, 1)
	init := json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"sampling":{}},"clientInfo":{"name":"httpback-test","version":"1"}}`)
	_, s := session(t, url, httpback.Config{
		Init: init,
		OnNotification: func(method string, params json.RawMessage) {
			if method == "notifications/progress" {
				mu.Lock()
				progress++
				mu.Unlock()
			}
		},
		OnRequest: func(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
			if method == "sampling/createMessage" {
				sampled <- struct{}{}
				return json.RawMessage(`{"role":"assistant","content":{"type":"text","text":"sampled"},"model":"test"}`), nil
			}
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: method}
		},
	})
	if s.ID() == "" || !strings.Contains(string(s.InitResult()), "serverInfo") {
		t.Fatalf("handshake: session %q, init %s", s.ID(), s.InitResult())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tools, err := s.Call(ctx, "tools/list", nil)
	if err != nil || !strings.Contains(string(tools), `"echo"`) {
		t.Fatalf("tools/list: %v %.200s", err, tools)
	}
	res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"trigger-long-running-operation","arguments":{"duration":1,"steps":3},"_meta":{"progressToken":"p1"}}`))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := progress
	mu.Unlock()
	if n < 3 || !strings.Contains(string(res), "completed") {
		t.Fatalf("long-running operation: %d progress notifications before its result %s", n, res)
	}
	res, err = s.Call(ctx, "tools/call", json.RawMessage(`{"name":"trigger-sampling-request","arguments":{"prompt":"hi","maxTokens":5}}`))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-sampled:
	default:
		t.Fatalf("the sampling request never reached OnRequest; result %s", res)
	}
	if !strings.Contains(string(res), "sampled") {
		t.Fatalf("the tool did not get the sampling answer: %s", res)
	}
}
