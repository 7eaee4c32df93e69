package httpback

import (
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// stamps records when each request came.
type stamps struct {
	mu sync.Mutex
	at []time.Time
}

func (s *stamps) add() {
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	s.mu.Unlock()
}

// waitFor waits (at most a minute) until n requests came, and returns the gaps between them.
func (s *stamps) waitFor(t *testing.T, n int) []time.Duration {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		s.mu.Lock()
		if len(s.at) >= n {
			var gaps []time.Duration
			for i := 1; i < n; i++ {
				gaps = append(gaps, s.at[i].Sub(s.at[i-1]))
			}
			s.mu.Unlock()
			return gaps
		}
		got := len(s.at)
		s.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%d requests in a minute, want %d", got, n)
		}
	}
}

// A call's stream cut before its response, and its resumption refused with 503 and
// Retry-After: 3: the resumption is asked again no sooner than the server asked. Before
// 2026-12-07 Retry-After was ignored and it was asked again a getRetry (1 s) later.
func TestResumptionHonoursRetryAfter(t *testing.T) {
	f, srv := newFake(t)
	var at stamps
	f.resumedAfterE1(func(n int32, w http.ResponseWriter, _ *http.Request) {
		at.add()
		if n == 1 {
			w.Header().Set("Retry-After", "3")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "e2", jsonrpc.Response(json.RawMessage(`2`), json.RawMessage(`{"content":[],"ok":true}`)))
	})
	s := session(t, upstream(t, srv.URL, Config{}))
	res, err := callWithin(t, s, "the call waited on")
	if err != nil || string(res) != `{"content":[],"ok":true}` {
		t.Fatalf("result %s, %v; want the result the second resumption brings", res, err)
	}
	if gap := at.waitFor(t, 2)[0]; gap < 3*time.Second {
		t.Fatalf("the resumption was asked again %v after the server's 503 with Retry-After: 3", gap)
	}
}

// The session's GET stream refused with 503 and Retry-After: 3 is asked for again no sooner
// than the server asked (before 2026-12-07: a getRetry, 1 s, later).
func TestGETStreamHonoursRetryAfter(t *testing.T) {
	gap := secondGETGap(t, func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "3")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	})
	if gap < 3*time.Second {
		t.Fatalf("the GET stream was asked for again %v after the server's 503 with Retry-After: 3", gap)
	}
}

// secondGETGap answers the session's first GET stream with first and holds the next one
// quiet, and returns the time between them.
func secondGETGap(t *testing.T, first func(w http.ResponseWriter)) time.Duration {
	t.Helper()
	f, srv := newFake(t)
	var at stamps
	var n atomic.Int32
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		at.add()
		if n.Add(1) == 1 {
			first(w)
			return
		}
		holdQuiet(w, r)
	}
	session(t, upstream(t, srv.URL, Config{}))
	return at.waitFor(t, 2)[0]
}

// The session's GET stream refused again and again (503), or ended at once each time without
// an event, is asked for again twice as long apart each round (1 s, 2 s, 4 s, ...), not every
// second for the session's life as before 2026-12-07.
func TestGETStreamBacksOffWhileRefused(t *testing.T) {
	t.Parallel()
	for name, reply := range map[string]func(w http.ResponseWriter){
		"refused": func(w http.ResponseWriter) { http.Error(w, "unavailable", http.StatusServiceUnavailable) },
		"ended at once": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
		},
	} {
		t.Run(name, func(t *testing.T) {
			f, srv := newFake(t)
			var at stamps
			f.getReply = func(w http.ResponseWriter, r *http.Request) {
				at.add()
				reply(w)
			}
			session(t, upstream(t, srv.URL, Config{}))
			gaps := at.waitFor(t, 4)
			for i, gap := range gaps {
				if want := getRetry << i; gap < want {
					t.Fatalf("the GET stream was asked for again after %v; want the rounds %v, %v, %v apart at least", gaps, getRetry, 2*getRetry, 4*getRetry)
				}
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	now := time.Date(2026, 12, 7, 15, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{now.Add(9 * time.Second).Format(http.TimeFormat), 9 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
	} {
		if got := parseRetryAfter(c.header, now); got != c.want {
			t.Errorf("Retry-After %q: %v, want %v", c.header, got, c.want)
		}
	}
	for _, c := range []struct {
		err  error
		want time.Duration
	}{
		{nil, getRetry},
		{errors.New("reset"), getRetry},
		{&StatusError{Status: 503}, getRetry},
		{&StatusError{Status: 503, retryAfter: 7 * time.Second}, 7 * time.Second},
		{&StatusError{Status: 429, retryAfter: 24 * time.Hour}, maxRetryAfter},
		{&StatusError{Status: 503, retryAfter: time.Millisecond}, getRetry},
	} {
		if got := retryDelay(c.err, getRetry); got != c.want {
			t.Errorf("retryDelay(%v): %v, want %v", c.err, got, c.want)
		}
	}
}

// A server that feeds the resumption of the session's GET stream (as the TypeScript SDK with
// an event store that names an event's stream does, and go-sdk) holds it as the session's
// stream and refuses a fresh one with 409: what it sends on the resumption is delivered, once,
// and the fresh stream is asked for at most freshTries times.
func TestGETResumptionFedGoesOnAlone(t *testing.T) {
	t.Parallel()
	f, srv := newFake(t)
	var gets, fresh atomic.Int32
	refused := make(chan struct{})
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		n := gets.Add(1)
		switch {
		case n == 1: // the first stream: an event, then its end
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "g1", jsonrpc.Notification("notifications/message", json.RawMessage(`{"level":"info","data":"one"}`)))
		case r.Header.Get("Last-Event-Id") == "g1":
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "g1", jsonrpc.Notification("notifications/message", json.RawMessage(`{"level":"info","data":"one"}`))) // replayed
			<-refused
			writeEvent(w, "g2", jsonrpc.Notification("notifications/message", json.RawMessage(`{"level":"info","data":"two"}`)))
			<-r.Context().Done()
		default:
			if fresh.Add(1) == freshTries {
				close(refused)
			}
			http.Error(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Conflict: Only one SSE stream is allowed per session"}}`, http.StatusConflict)
		}
	}
	var mu sync.Mutex
	var got []string
	delivered := make(chan struct{}, 8)
	session(t, upstream(t, srv.URL, Config{OnNotification: func(method string, p json.RawMessage) {
		mu.Lock()
		got = append(got, string(p))
		mu.Unlock()
		delivered <- struct{}{}
	}}))
	for i := 0; i < 2; i++ {
		select {
		case <-delivered:
		case <-time.After(time.Minute):
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("delivered %q in a minute; want both messages", got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 || got[0] == got[1] {
		t.Fatalf("delivered %q; want each message once", got)
	}
	if n := fresh.Load(); n != freshTries {
		t.Fatalf("%d fresh GETs beside the resumption, want %d", n, freshTries)
	}
}

// A call's stream that gave a reconnection time (the SSE retry field, 3000 ms) and was cut
// before its response is resumed no sooner than that (2025-11-25: a client MUST wait it);
// before 2026-12-07 the field was ignored and the first resumption asked at once.
func TestResumptionWaitsTheStreamsRetry(t *testing.T) {
	f, srv := newFake(t)
	var at stamps
	f.call = func(w http.ResponseWriter, _ *http.Request, _ *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("retry: 3000\n"))
		writeEvent(w, "e1", jsonrpc.Notification("notifications/progress", json.RawMessage(`{"progressToken":1,"progress":1}`)))
		at.add()
		panic(http.ErrAbortHandler)
	}
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-Id") != "e1" {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		at.add()
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "e2", jsonrpc.Response(json.RawMessage(`2`), json.RawMessage(`{"content":[],"ok":true}`)))
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	res, err := callWithin(t, s, "the call waited on")
	if err != nil || string(res) != `{"content":[],"ok":true}` {
		t.Fatalf("result %s, %v; want the result the resumption brings", res, err)
	}
	if gap := at.waitFor(t, 2)[0]; gap < 3*time.Second {
		t.Fatalf("the cut stream was resumed %v after the cut; its retry field asked for 3 s", gap)
	}
}

// The session's GET stream that gave a reconnection time (retry: 3000) and ended is asked for
// again no sooner than that (before 2026-12-07: a getRetry, 1 s, later).
func TestGETStreamWaitsItsRetry(t *testing.T) {
	gap := secondGETGap(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("retry: 3000\n\n"))
		w.(http.Flusher).Flush()
	})
	if gap < 3*time.Second {
		t.Fatalf("the GET stream was asked for again %v after it ended; its retry field asked for 3 s", gap)
	}
}

// The retry field's value is milliseconds in ASCII digits only, else ignored.
func TestRetryField(t *testing.T) {
	for in, want := range map[string]time.Duration{"3000": 3 * time.Second, "0": 0, "007": 7 * time.Millisecond, "99999999999999999999999": 1<<63 - 1} {
		if got, ok := retryField([]byte(in)); !ok || got != want {
			t.Errorf("retry: %s read as %v %v, want %v", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5", " 3", "3s", "١٢"} {
		if got, ok := retryField([]byte(in)); ok {
			t.Errorf("retry: %q read as %v, want ignored", in, got)
		}
	}
}
