package httpback

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Found in review (2026-12-06). A call's stream cut before its response is resumed with GET
// and Last-Event-ID, right away. A server that has not yet noticed the cut still holds the old
// stream and refuses the resumption for now (the TypeScript SDK, with an event store that maps
// event ids to streams, answers 409 "Stream already has an active connection"; a proxy
// restarting answers 502 or refuses the connection). Asking again a getRetry later re-sends
// nothing and gets the result. Before, the first refusal ended the call: a call that ran, whose
// result the server still had, was left unknown.
func TestRefusedResumptionIsAskedAgain(t *testing.T) {
	for _, code := range []int{http.StatusConflict, http.StatusBadGateway, http.StatusServiceUnavailable} {
		f, srv := newFake(t)
		f.resumedAfterE1(func(n int32, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				http.Error(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Conflict: Stream already has an active connection"}}`, code)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "e2", jsonrpc.Response(json.RawMessage(`2`), json.RawMessage(`{"content":[],"ok":true}`)))
		})
		s := session(t, upstream(t, srv.URL, Config{}))
		res, err := callWithin(t, s, "HTTP %d: the call waited on", code)
		if err != nil || string(res) != `{"content":[],"ok":true}` {
			t.Fatalf("HTTP %d to the first resumption: result %s, %v; want the result the second one brings", code, res, err)
		}
		if n := f.count("tools/call"); n != 1 {
			t.Fatalf("HTTP %d: %d POSTs of the call, want 1", code, n)
		}
	}
}

// Found in review (2026-12-06). A server's request id is never used twice in a session (the
// MCP base protocol), nor an event id on two streams of it (Streamable HTTP). An event store
// that replays, on a resumption, every event of the session after Last-Event-ID rather than
// only that stream's (server-everything's own store does) hands the client again a request
// it already answered on another stream. It must not be answered twice: OnRequest is a
// sampling the agent pays for, or a question put to a person. Before, it was handed to
// OnRequest again.
func TestReplayedServerRequestIsNotAnsweredTwice(t *testing.T) {
	f, srv := newFake(t)
	f.responses = make(chan *jsonrpc.Message, 8)
	started, answered := make(chan struct{}), make(chan struct{})
	go func() {
		<-f.responses
		close(answered)
	}()
	request := jsonrpc.Request(json.RawMessage(`"r1"`), "roots/list", nil)
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvent(w, "e0", jsonrpc.Notification("notifications/progress", json.RawMessage(`{"progressToken":1,"progress":1}`)))
		close(started)
		<-answered
		panic(http.ErrAbortHandler) // cut before the response
	}
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if r.Header.Get("Last-Event-Id") == "e0" {
			// Every event of the session after e0: the GET stream's request, then the response.
			writeEvent(w, "e1", request)
			writeEvent(w, "e2", jsonrpc.Response(json.RawMessage(`2`), json.RawMessage(`{"content":[]}`)))
			return
		}
		if r.Header.Get("Last-Event-Id") != "" {
			<-r.Context().Done()
			return
		}
		select {
		case <-started:
		case <-r.Context().Done():
			return
		}
		writeEvent(w, "e1", request)
		<-r.Context().Done()
	}
	var asked atomic.Int32
	s := session(t, upstream(t, srv.URL, Config{OnRequest: func(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
		asked.Add(1)
		return json.RawMessage(`{"roots":[]}`), nil
	}}))
	res, err := callWithin(t, s, "the call waited on")
	if err != nil || string(res) != `{"content":[]}` {
		t.Fatalf("result %s, %v", res, err)
	}
	time.Sleep(100 * time.Millisecond) // a second OnRequest, if any, has started
	if n := asked.Load(); n != 1 {
		t.Fatalf("the server's request r1 was handed to OnRequest %d times, want 1", n)
	}
}

// A call's stream cut before its response, whose resumption the server refuses with 404 to
// the session's id: by the transport's rules the server no longer knows the session (it
// restarted). The call may have run, and says so; but the session is retired at once, so the
// next call opens a new session instead of being sent on the lost one. Before, the session
// stayed the live one until its GET stream noticed (and never, against a server that offers
// none): the next call was sent on it and, against a server that answers 400 to an unknown
// session (the TypeScript SDK's examples), left "may have run" though the server refused it
// unread.
func TestCallResumptionRefused404RetiresTheSession(t *testing.T) {
	f, srv := newFake(t)
	f.resumedAfterE1(func(_ int32, w http.ResponseWriter, _ *http.Request) {
		http.Error(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}`, http.StatusNotFound)
	})
	u := upstream(t, srv.URL, Config{})
	s := session(t, u)
	_, err := callWithin(t, s, "the call waited on after its resumption was refused 404")
	if err == nil || errors.Is(err, mcpstdio.ErrNotSent) {
		t.Fatalf("the cut call: %v; want an error that says it may have run", err)
	}
	if !errors.Is(s.Err(), ErrSessionLost) || u.Current() == s {
		t.Fatalf("after the server refused the resumption 404, the session is still the live one (err %v)", s.Err())
	}
}
