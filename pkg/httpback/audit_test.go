package httpback

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Tests of promises of docs/gateway-backend.md that no other test held, each against a real
// net/http (or raw TCP) server that misbehaves on purpose.

// stamper is client middleware that puts an Idempotency-Key on every request after
// httpback has set its headers, as some SDKs' transports do.
type stamper struct{ next http.RoundTripper }

func (s stamper) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Idempotency-Key", "stamped")
	return s.next.RoundTrip(req)
}

// Go's transport replays a POST on a reused connection that broke after the request was
// written only when the request has both a way to rewind its body (GetBody) and an
// idempotency key. httpback removes both, and each guard must hold on its own: the server
// never sees an Idempotency-Key or X-Idempotency-Key from Config.Header, and a key that
// client middleware adds later still does not make the POST replayable.
func TestEachReplayGuardHoldsAlone(t *testing.T) {
	for _, c := range []struct {
		name   string
		header http.Header
		client func() *http.Client
	}{
		{"keys in Config.Header", http.Header{"idempotency-key": {"k1"}, "X-Idempotency-Key": {"k2"}}, nil},
		{"a key stamped by middleware", nil, func() *http.Client {
			return &http.Client{Transport: stamper{&http.Transport{}}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, srv := newFake(t)
			var keyed atomic.Int32
			f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
				if c.client == nil && (r.Header.Get("Idempotency-Key") != "" || r.Header.Get("X-Idempotency-Key") != "") {
					keyed.Add(1)
				}
				if m.Method == "ping" {
					w.Header().Set("Content-Type", "application/json")
					w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
					return
				}
				conn, _, err := w.(http.Hijacker).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				conn.Close() // the request was read whole: it may have run
			}
			cfg := Config{Header: c.header}
			if c.client != nil {
				cfg.Client = c.client()
			}
			s := session(t, upstream(t, srv.URL, cfg))
			if _, err := s.Call(context.Background(), "ping", nil); err != nil { // warms a keep-alive connection
				t.Fatal(err)
			}
			_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
			mayHaveRun(t, err)
			if n := f.count("tools/call"); n != 1 {
				t.Fatalf("the server saw the call %d times; want exactly 1", n)
			}
			if n := keyed.Load(); n != 0 {
				t.Fatalf("%d requests reached the server with an idempotency key from Config.Header", n)
			}
		})
	}
}

// A TLS handshake that fails (here the server's certificate is refused) is "no connection
// could be made": not sent, and the server saw nothing of the call.
func TestTLSHandshakeFailureIsNotSent(t *testing.T) {
	f, _ := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
	}
	srv := httptest.NewUnstartedServer(f)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes
	srv.StartTLS()
	t.Cleanup(srv.Close)
	var refuse atomic.Bool
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true // every request dials and shakes hands anew
	tr.TLSClientConfig.VerifyConnection = func(tls.ConnectionState) error {
		if refuse.Load() {
			return errors.New("certificate refused by the test")
		}
		return nil
	}
	s := session(t, upstream(t, srv.URL, Config{Client: &http.Client{Transport: tr}}))
	if _, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`)); err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
	if !errors.Is(err, mcpstdio.ErrNotSent) || !strings.Contains(err.Error(), "certificate refused") {
		t.Fatalf("a call whose TLS handshake failed: %v; want ErrNotSent naming the cause", err)
	}
	if n := f.count("tools/call"); n != 1 {
		t.Fatalf("the server saw %d tools/call; want only the first", n)
	}
}

// Over HTTP/2 (TLS, as DefaultClient negotiates it), a stream the server resets after it read
// the request may have run, and the request is not sent again.
func TestHTTP2ResetAfterTheRequestMayHaveRun(t *testing.T) {
	f := &fake{t: t, sid: "s1", posts: map[string]int{}, headers: map[string]http.Header{}}
	var proto atomic.Int32
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		proto.Store(int32(r.ProtoMajor))
		if m.Method == "ping" {
			w.Header().Set("Content-Type", "application/json")
			w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
			return
		}
		panic(http.ErrAbortHandler) // RST_STREAM after the whole request was read
	}
	srv := httptest.NewUnstartedServer(f)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	tr := DefaultClient().Transport.(*http.Transport)
	tr.TLSClientConfig.RootCAs = srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	s := session(t, upstream(t, srv.URL, Config{Client: &http.Client{Transport: tr}}))
	for _, warm := range []bool{false, true} {
		if warm {
			if _, err := s.Call(context.Background(), "ping", nil); err != nil {
				t.Fatal(err)
			}
		}
		before := f.count("tools/call")
		_, err := callWithin(t, s, "the call waited 30 s on a reset stream")
		mayHaveRun(t, err)
		if n := f.count("tools/call") - before; n != 1 {
			t.Fatalf("the server saw the call %d times; want exactly 1", n)
		}
	}
	if proto.Load() != 2 {
		t.Fatalf("the server was spoken to over HTTP/%d; the test needs HTTP/2", proto.Load())
	}
}

// The one reconnection is one resumption: a call's stream cut before the response is resumed
// with GET and Last-Event-ID once; when the resumed stream is cut too, the call may have run,
// and nothing is asked again (no second GET, no second POST).
func TestSecondCutAfterResumptionMayHaveRun(t *testing.T) {
	f, srv := newFake(t)
	var resumes atomic.Int32
	f.call = cutAfterAnEvent
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-Id") == "" {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		resumes.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "e2", jsonrpc.Notification("notifications/progress", json.RawMessage(`{"progressToken":1,"progress":2}`)))
		fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	_, err := callWithin(t, s, "the call waited 30 s after its stream was cut twice")
	mayHaveRun(t, err)
	// The first resumption brought e2, so it is resumed once more; cut again at e2, given up.
	if n, p := resumes.Load(), f.count("tools/call"); n != 2 || p != 1 {
		t.Fatalf("%d resumptions and %d POSTs; want 2 and 1", n, p)
	}
}

// An event id HTTP cannot send back as Last-Event-ID names no place to resume from: a call's
// stream cut after it is not resumed (not with that id, nor with an earlier one) and may have
// run.
func TestUnsendableEventIDOfACallIsNotResumed(t *testing.T) {
	for name, id := range map[string]string{
		"control character": "e\x01",
		"byte beyond ASCII": "e\xc3\xa9",
		"longer than 1 KiB": strings.Repeat("9", 1025),
		"a space inside":    "e 1",
		"empty (a reset)":   "",
		"DEL character":     "e\x7f",
	} {
		t.Run(name, func(t *testing.T) {
			f, srv := newFake(t)
			f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
				w.Header().Set("Content-Type", "text/event-stream")
				writeEvent(w, "e0", jsonrpc.Notification("notifications/progress", json.RawMessage(`{"progressToken":1,"progress":1}`)))
				fmt.Fprintf(w, "id: %s\ndata: {}\n\n", id)
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			}
			s := session(t, upstream(t, srv.URL, Config{}))
			_, err := callWithin(t, s, "the call waited 30 s after its stream was cut")
			mayHaveRun(t, err)
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, h := range f.gets {
				if v := h.Get("Last-Event-Id"); v != "" {
					t.Fatalf("the stream was resumed with Last-Event-ID %.20q; want no resumption", v)
				}
			}
		})
	}
}

// rawServer answers each POST of an initialize with the headers and body given byte for byte
// (net/http would clean the headers), other POSTs with 202, anything else with 405.
func rawServer(t *testing.T, head, body string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				b, _ := io.ReadAll(req.Body)
				m, _ := jsonrpc.Parse(b)
				switch {
				case req.Method != http.MethodPost || m == nil:
					io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
					return
				case m.Method != "initialize": // notifications/initialized: a session would be built
					io.WriteString(c, "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
					return
				}
				resp := strings.ReplaceAll(body, "ID", string(m.ID))
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s", head, len(resp), resp)
			}(c)
		}
	}()
	return "http://" + ln.Addr().String() + "/mcp"
}

// An initialize answer a session cannot be built on (a session id or protocol version HTTP
// cannot send back, a result that is not an object) fails the connect with a clear error,
// not sent, never a panic nor a session with an empty or mangled id.
func TestHostileInitializeAnswerIsRefused(t *testing.T) {
	const json200 = "Content-Type: application/json\r\n"
	good := `{"jsonrpc":"2.0","id":ID,"result":{"protocolVersion":"2025-06-18","capabilities":{}}}`
	for _, c := range []struct {
		name, head, body, want string
	}{
		{"session id with a control character", json200 + "Mcp-Session-Id: s\x01cret\r\n", good, "Mcp-Session-Id"},
		{"session id beyond ASCII", json200 + "Mcp-Session-Id: s\xc3\xa9cret\r\n", good, "Mcp-Session-Id"},
		{"session id longer than 1 KiB", json200 + "Mcp-Session-Id: " + strings.Repeat("s", 1025) + "\r\n", good, "Mcp-Session-Id"},
		{"no protocolVersion", json200 + "Mcp-Session-Id: scret\r\n", `{"jsonrpc":"2.0","id":ID,"result":{"capabilities":{}}}`, "protocolVersion"},
		{"protocolVersion a number", json200, `{"jsonrpc":"2.0","id":ID,"result":{"protocolVersion":20250618}}`, "protocolVersion"},
		{"protocolVersion with a line break", json200, `{"jsonrpc":"2.0","id":ID,"result":{"protocolVersion":"2025-06-18\r\nX-Evil: 1"}}`, "protocolVersion"},
		{"result an array", json200, `{"jsonrpc":"2.0","id":ID,"result":[]}`, "not a JSON object"},
		{"result null", json200, `{"jsonrpc":"2.0","id":ID,"result":null}`, "not a JSON object"},
		{"an answer to another id", json200, `{"jsonrpc":"2.0","id":77,"result":{"protocolVersion":"2025-06-18"}}`, "not the response"},
		{"an event stream of junk", "Content-Type: text/event-stream\r\n", "data: \x00\xff\n\nevent\n\n", "before the response"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := upstream(t, rawServer(t, c.head, c.body), Config{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s, err := u.Session(ctx)
			if err == nil {
				t.Fatalf("a session (id %.20q, version %.20q) was built on a hostile initialize answer", s.ID(), s.ProtocolVersion())
			}
			if !errors.Is(err, mcpstdio.ErrNotSent) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v; want not sent, naming %s", err, c.want)
			}
		})
	}
}

// A 404 to a session that has no Mcp-Session-Id says nothing about a lost session: it is any
// other status, may have run. A 404 to the GET stream of a session that had one, asked
// without Last-Event-ID, says the server lost the session: it is retired, and the next
// Session starts a new one.
func TestNotFoundWithoutAndOnTheGETStream(t *testing.T) {
	f, srv := newFake(t)
	f.sid = ""
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) { w.WriteHeader(http.StatusNotFound) }
	s := session(t, upstream(t, srv.URL, Config{}))
	_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
	mayHaveRun(t, err)
	var se *StatusError
	if !errors.As(err, &se) || se.Status != http.StatusNotFound || errors.Is(err, ErrSessionLost) {
		t.Fatalf("HTTP 404 without a session: %v; want a *StatusError", err)
	}

	f, srv = newFake(t)
	var gets atomic.Int32
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) == 1 {
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "", jsonrpc.Notification("notifications/tools/list_changed", nil))
			return // the stream ends; asking again is refused
		}
		w.WriteHeader(http.StatusNotFound)
	}
	u := upstream(t, srv.URL, Config{})
	s = session(t, u)
	select {
	case <-s.Done():
	case <-time.After(time.Minute):
		t.Fatal("a minute after the server refused the session's GET stream with 404, the session is still live")
	}
	if u.Current() != nil || !strings.Contains(s.Err().Error(), "no longer knows the session") {
		t.Fatalf("the session after a 404 to its GET stream: current %v, %v", u.Current() != nil, s.Err())
	}
	if s2 := session(t, u); s2 == s || u.Starts() != 2 {
		t.Fatalf("no new session (starts %d)", u.Starts())
	}
}

// untraced is a client transport that does not report to httptrace, as one not built on
// net/http's (HTTP/3, say) does not: the request goes out on a transport of its own, with a
// context that carries no trace.
type untraced struct{ next *http.Transport }

func (u untraced) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(context.Background()) // none of the caller's values
	stop := context.AfterFunc(req.Context(), cancel)
	resp, err := u.next.RoundTrip(req.WithContext(ctx))
	if err != nil || resp == nil {
		stop()
		cancel()
	}
	return resp, err
}

// "Not sent" needs the transport's word that it found no connection. With a Config.Client
// whose transport does not report to httptrace, a request the server read and then cut may
// have run: before, no GotConn was taken for "no connection", so it was "not sent", and the
// core would have let the next call run it again.
func TestUntracedTransportFailureMayHaveRun(t *testing.T) {
	f, srv := newFake(t)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close() // the request was read whole
	}
	s := session(t, upstream(t, srv.URL, Config{Client: &http.Client{Transport: untraced{&http.Transport{}}}}))
	_, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
	mayHaveRun(t, err)
	if n := f.count("tools/call"); n != 1 {
		t.Fatalf("the server saw the call %d times; want exactly 1", n)
	}
}
