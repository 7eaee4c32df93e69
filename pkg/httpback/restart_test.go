package httpback

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// The real server-everything restarted under a live session: it forgets its sessions and
// answers 400 to their ids (as servers built on the TypeScript SDK's example do). The
// session's GET stream breaks with the restart, and reopening it is refused: that retires the
// session, so the next call goes to a new one and runs. Before, nothing noticed until a call
// was sent on the dead session; its 400 may mean anything, so that call was "may have run"
// and, fenced, left unknown for an operator to clear, though the server had refused it
// unread: one false unknown per agent session after every upstream restart.
func TestRestartedServerIsNoticedOnTheGETStream(t *testing.T) {
	t.Parallel()
	e := startEverything(t, 0)
	u := upstream(t, e.url(), Config{Init: everythingInit, Log: &testLog{t}})
	s := session(t, u)
	deadline := time.Now().Add(time.Minute)
	for !s.streamed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the GET stream of the session never opened")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.stop()
	startEverything(t, e.port)
	deadline = time.Now().Add(time.Minute)
	for u.Current() == s {
		if time.Now().After(deadline) {
			t.Fatal("a minute after the server restarted, the session it forgot is still the live one: the next call goes to it, is answered 400 and may have run")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "no longer knows the session") {
		t.Fatalf("the retired session's error is %v; want it to say the server no longer knows the session", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s2, err := u.Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s2.Call(ctx, "tools/call", json.RawMessage(`{"name":"get-sum","arguments":{"a":2,"b":3}}`))
	if err != nil || !strings.Contains(string(res), "is 5") {
		t.Fatalf("the first call after the restart: %s, %v; want it run in a new session", res, err)
	}
	if u.Starts() != 2 {
		t.Fatalf("%d sessions started, want 2", u.Starts())
	}
}

// A live session whose GET stream is refused only its resumption (400: an event store that no
// longer has the event, as the TypeScript SDK's answers) is not taken for lost: the stream is
// asked for again without Last-Event-ID, and the session stays the live one.
func TestRefusedResumptionOfTheGETStreamKeepsTheSession(t *testing.T) {
	f, srv := newFake(t)
	var n atomic.Int32
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1: // a stream with an event id, then its end
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "g1", jsonrpc.Notification("notifications/tools/list_changed", nil))
		case 2:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Invalid event ID format"}}`))
		default:
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	}
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{}`)))
	}
	u := upstream(t, srv.URL, Config{})
	s := session(t, u)
	deadline := time.Now().Add(time.Minute)
	for n.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d GETs a minute after the session started; want the stream resumed, refused, and opened again", n.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	f.mu.Lock()
	resumed, again := f.gets[1].Get("Last-Event-Id"), f.gets[2].Get("Last-Event-Id")
	f.mu.Unlock()
	if resumed != "g1" || again != "" {
		t.Fatalf("Last-Event-ID of the second and third GET: %q, %q; want g1, then none", resumed, again)
	}
	if u.Current() != s || s.Err() != nil {
		t.Fatalf("the session was retired (%v) after only its resumption was refused", s.Err())
	}
	if _, err := s.Call(context.Background(), "ping", nil); err != nil {
		t.Fatal(err)
	}
}
