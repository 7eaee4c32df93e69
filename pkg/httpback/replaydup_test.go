package httpback

import (
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

// TestEverythingQuietResumptionsDoNotDeliverACallsProgressAgain: server-everything's event
// store replays, on any resumption, every event of the session after Last-Event-ID, not only
// that stream's. Once the session's GET stream has been cut and resumed, it is resumed again
// after each quiet spell (resumedQuiet, shortened here), and each time it replays what the
// session's calls' streams carried meanwhile: a call's progress, already delivered on its own
// stream, must not be delivered again.
func TestEverythingQuietResumptionsDoNotDeliverACallsProgressAgain(t *testing.T) {
	e := startEverything(t, 0)
	target, err := url.Parse(e.url())
	if err != nil {
		t.Fatal(err)
	}
	target.Path = ""
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0) // the cut is on purpose
	var firstGETs, resumes atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.Header.Get(headerLastEventID) != "" {
			resumes.Add(1)
		}
		if r.Method == http.MethodGet && r.Header.Get(headerLastEventID) == "" && firstGETs.Add(1) == 1 {
			ctx, cancel := context.WithTimeout(r.Context(), 6*time.Second) // past the first log message
			defer cancel()
			rp.ServeHTTP(w, r.WithContext(ctx))
			panic(http.ErrAbortHandler)
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
	if _, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"toggle-simulated-logging","arguments":{}}`)); err != nil {
		t.Fatal(err)
	}
	for resumes.Load() == 0 {
		if ctx.Err() != nil {
			t.Fatal("the session's GET stream was never resumed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"trigger-long-running-operation","arguments":{"duration":2,"steps":2},"_meta":{"progressToken":"p-once"}}`))
	if err != nil || !strings.Contains(string(res), "Long running operation completed") {
		t.Fatalf("the call: %s, %v", res, err)
	}
	time.Sleep(4 * resumedQuiet)
	mu.Lock()
	defer mu.Unlock()
	if len(progress) != 2 {
		t.Fatalf("progress delivered %d times (GET resumptions %d): %q; want the 2 steps once each", len(progress), resumes.Load(), progress)
	}
}

// TestReplayedNoteIsByIDAndData: a notification event is taken for one delivered before only
// on a resumed stream, and only with the same id and the same data: a server that numbers each
// stream's events on its own loses none of them.
func TestReplayedNoteIsByIDAndData(t *testing.T) {
	t.Parallel()
	var s Session
	a := sseEvent{id: "1", hasID: true, data: []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"a"}}`)}
	b := sseEvent{id: "1", hasID: true, data: []byte(`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"b"}}`)}
	if s.replayedNote(a, false) {
		t.Fatal("the first event was taken for a replay")
	}
	if s.replayedNote(a, false) {
		t.Fatal("the same event again on a stream that was not resumed was taken for a replay")
	}
	if !s.replayedNote(a, true) {
		t.Fatal("the same event on a resumed stream was not taken for a replay")
	}
	if s.replayedNote(b, true) {
		t.Fatal("another event under the same id was taken for a replay")
	}
	if s.replayedNote(sseEvent{data: a.data}, true) {
		t.Fatal("an event without an id was taken for a replay")
	}
}
