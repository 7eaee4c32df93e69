package httpback

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// hangWithoutHeaders holds a GET open without writing its status line, as a hung server or a
// proxy whose upstream never answers does, until the client gives the request up.
func hangWithoutHeaders(r *http.Request) { <-r.Context().Done() }

// TestResumptionWhoseHeadersNeverComeIsAskedAgain: a call's stream is cut, and the GETs that
// resume it get no response headers: the server (or a proxy before it) hung on them. Such a
// GET is given up after getHeaders and asked again, as one that had no answer. Before
// 2026-12-07 a GET had no bound of its own, and the call waited on the first one for ever: a
// call that ran, whose result the server still had, in flight for good, its duplicates told
// it still runs.
func TestResumptionWhoseHeadersNeverComeIsAskedAgain(t *testing.T) {
	defer func(d time.Duration) { getHeaders = d }(getHeaders)
	getHeaders = 300 * time.Millisecond
	const hung = 2
	f, srv := newFake(t)
	var gets atomic.Int32
	f.call = cutAfterAnEvent
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-Id") != "e1" {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if gets.Add(1) <= hung {
			hangWithoutHeaders(r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "e2", jsonrpc.Response(json.RawMessage(`2`), json.RawMessage(`{"content":[],"ok":true}`)))
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	res, err := callWithin(t, s, "the call waited on a resumption whose headers never came")
	if err != nil || string(res) != `{"content":[],"ok":true}` {
		t.Fatalf("result %s, %v; want the result the resumption after %d hung ones brings", res, err, hung)
	}
	if n := f.count("tools/call"); n != 1 {
		t.Fatalf("%d POSTs of the call, want 1", n)
	}
	if n := gets.Load(); n != hung+1 {
		t.Fatalf("%d resuming GETs, want %d", n, hung+1)
	}
}

// TestResumptionWhoseHeadersNeverComeEnds: no resuming GET of a cut call ever gets headers.
// The call ends after resumeTries GETs as one whose stream was cut: it may have run. Before
// 2026-12-07 it waited for ever.
func TestResumptionWhoseHeadersNeverComeEnds(t *testing.T) {
	defer func(d time.Duration) { getHeaders = d }(getHeaders)
	getHeaders = 200 * time.Millisecond
	f, srv := newFake(t)
	var gets atomic.Int32
	f.call = cutAfterAnEvent
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-Id") != "e1" {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		gets.Add(1)
		hangWithoutHeaders(r)
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	_, err := callWithin(t, s, "the call waited on resumptions whose headers never came")
	mayHaveRun(t, err)
	if !strings.Contains(err.Error(), "no response headers within 200ms") {
		t.Fatalf("error %q does not say the resumption got no headers", err)
	}
	if n := gets.Load(); n != resumeTries {
		t.Fatalf("%d resuming GETs, want %d", n, resumeTries)
	}
	if n := f.count("tools/call"); n != 1 {
		t.Fatalf("%d POSTs of the call, want 1", n)
	}
}

// TestSessionStreamWhoseHeadersNeverComeIsOpenedAgain: the session's GET stream, the one the
// server sends its own messages on (logging, list_changed, its requests), gets no headers the
// first time. It is given up after getHeaders and opened again; what the server sends on the
// second is delivered. Before 2026-12-07 the session waited on the first GET for its life, and
// every message the server sent the session was lost.
func TestSessionStreamWhoseHeadersNeverComeIsOpenedAgain(t *testing.T) {
	defer func(d time.Duration) { getHeaders = d }(getHeaders)
	getHeaders = 300 * time.Millisecond
	f, srv := newFake(t)
	var gets atomic.Int32
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		if gets.Add(1) == 1 {
			hangWithoutHeaders(r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "", jsonrpc.Notification("notifications/message", json.RawMessage(`{"level":"info","data":"hello"}`)))
		<-r.Context().Done()
	}
	got := make(chan string, 4)
	s := session(t, upstream(t, srv.URL, Config{OnNotification: func(method string, _ json.RawMessage) { got <- method }}))
	_ = s
	select {
	case m := <-got:
		if m != "notifications/message" {
			t.Fatalf("delivered %s, want notifications/message", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("nothing delivered in 30 s after %d GETs: the session's stream waited on a GET whose headers never came", gets.Load())
	}
	if n := gets.Load(); n != 2 {
		t.Fatalf("%d GETs, want 2 (one hung, one answered)", n)
	}
}
