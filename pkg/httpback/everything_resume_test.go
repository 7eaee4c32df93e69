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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// cutOnProgress passes a response through until it has carried a progress notification,
// then cancels the upstream request (the proxy then stops, and the handler cuts the client).
type cutOnProgress struct {
	http.ResponseWriter
	cancel context.CancelFunc
	cut    bool
}

func (c *cutOnProgress) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.ResponseWriter.(http.Flusher).Flush()
	if bytes.Contains(p, []byte("notifications/progress")) {
		c.cut = true
		c.cancel()
	}
	return n, err
}

func (c *cutOnProgress) Flush() { c.ResponseWriter.(http.Flusher).Flush() }

// TestEverythingResumptionNeverFedIsResumedAgain: the real server-everything (Streamable HTTP)
// behind a proxy that cuts a call's stream after its first progress event. Its event store
// makes the SDK file the resumed stream under the wrong id (docs/gateway-backend.md): the
// first resumption replays nothing new and then stays silent, kept alive. Resumed again after
// resumedQuiet (shortened here), the call gets the progress it missed and its response,
// POSTed once. Before 2026-12-07 the call waited on the silent stream until its context ended.
func TestEverythingResumptionNeverFedIsResumedAgain(t *testing.T) {
	// Not parallel: it shortens resumedQuiet.
	e := startEverything(t, 0)
	target, err := url.Parse(e.url())
	if err != nil {
		t.Fatal(err)
	}
	target.Path = ""
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0) // the cut is on purpose
	var posts, resumes atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method == http.MethodGet && r.Header.Get(headerLastEventID) != "" {
			resumes.Add(1)
		}
		if r.Method == http.MethodPost && bytes.Contains(body, []byte(`"trigger-long-running-operation"`)) && posts.Add(1) == 1 {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			c := &cutOnProgress{ResponseWriter: w, cancel: cancel}
			rp.ServeHTTP(c, r.WithContext(ctx))
			if c.cut {
				panic(http.ErrAbortHandler)
			}
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	defer func(d time.Duration) { resumedQuiet = d }(resumedQuiet)
	resumedQuiet = 2 * time.Second

	var mu sync.Mutex
	var progress []string
	u := upstream(t, proxy.URL+"/mcp", Config{
		Init: everythingInit,
		OnNotification: func(method string, params json.RawMessage) {
			if method == "notifications/progress" {
				mu.Lock()
				progress = append(progress, string(params))
				mu.Unlock()
			}
		},
		OnRequest: func(context.Context, string, json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{}`), nil
		},
	})
	s := session(t, u)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"trigger-long-running-operation","arguments":{"duration":3,"steps":3},"_meta":{"progressToken":"p-cut"}}`))
	if err != nil || !strings.Contains(string(res), "Long running operation completed") {
		t.Fatalf("the call whose stream was cut after its first progress event: %s, %v; want its result (resumptions %d)", res, err, resumes.Load())
	}
	if n := posts.Load(); n != 1 {
		t.Fatalf("%d POSTs of the call, want 1", n)
	}
	if n := resumes.Load(); n < 2 {
		t.Fatalf("%d resumptions: the first was fed, so this test did not meet the server it means to (docs/gateway-backend.md)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) != 3 {
		t.Fatalf("progress delivered: %q; want the 3 steps, the 2 the silent resumption missed replayed", progress)
	}
}
