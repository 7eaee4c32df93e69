package httpback

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Found in review (2026-12-06). The session's GET stream is cut between httpback and the
// server while the server's side of it stays open for a while (a load balancer or proxy that
// closes one side first, a connection the server has not yet seen end). httpback opens it
// again a getRetry later, and the server, which still holds the old stream, refuses the new
// one with 409 (the TypeScript SDK: "Only one SSE stream is allowed per session"). That
// passes once the server sees the old stream end: the GET is asked again. Before, the 409 was
// taken for "a stream is open already" and the GET stream given up for the session's life,
// so every later message the server sends on it (logging, list_changed, resource updates, a
// request of its own) was lost. Against the real server-everything, whose simulated logging
// sends a message every 5 s on that stream, behind a proxy that cuts the first GET stream on
// the client's side and holds the server's side until the second GET has been refused.
func TestReopenedGETStreamRefusedWhileTheServerHoldsTheOldOne(t *testing.T) {
	t.Parallel()
	e := startEverything(t, 0)
	target, _ := url.Parse(e.url())
	target.Path = ""
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0)
	held, release := context.WithCancel(context.Background())
	defer release()
	var gets atomic.Int32
	var mu sync.Mutex
	var statuses []int
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method != http.MethodGet {
			rp.ServeHTTP(w, r)
			return
		}
		if gets.Add(1) == 1 {
			// The server's side stays open (held); the client's is cut once it is open.
			req, _ := http.NewRequestWithContext(held, http.MethodGet, e.url(), nil)
			req.Header = r.Header.Clone()
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			go func() { io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(resp.StatusCode)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		rp.ServeHTTP(&statusOf{ResponseWriter: w, seen: func(code int) {
			mu.Lock()
			statuses = append(statuses, code)
			mu.Unlock()
		}}, r)
		release() // the server may now see the first stream end
	}))
	t.Cleanup(proxy.Close)
	var logs atomic.Int32
	u := upstream(t, proxy.URL+"/mcp", Config{Init: everythingInit, Log: &testLog{t}, OnNotification: func(method string, _ json.RawMessage) {
		if method == "notifications/message" {
			logs.Add(1)
		}
	}})
	s := session(t, u)
	if _, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"toggle-simulated-logging","arguments":{}}`)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); logs.Load() == 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("no log message of the server's in a minute (one every 5 s); the GETs after the cut were answered %v: want the GET stream asked for again after a 409", statuses)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(statuses) < 2 || statuses[0] != http.StatusConflict {
		t.Fatalf("the GETs after the cut were answered %v; want a 409 first (the test did not make the server refuse the reopened stream)", statuses)
	}
}

// statusOf tells seen the status a handler writes.
type statusOf struct {
	http.ResponseWriter
	seen func(code int)
}

func (s *statusOf) WriteHeader(code int) { s.seen(code); s.ResponseWriter.WriteHeader(code) }
func (s *statusOf) Flush()               { s.ResponseWriter.(http.Flusher).Flush() }
