package httpback

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// TestPolledCallGetsItsResult: a server on the 2025-11-25 revision may end a call's
// stream after a priming event and again after each resumption (SSE polling: the TypeScript
// SDK's closeSSEStream, with retry:), expecting the client to reconnect with Last-Event-ID
// each time until the response comes. Each resumption here makes progress (a new event id),
// so the call should get its result, not an error that leaves a call that ran unknown.
func TestPolledCallGetsItsResult(t *testing.T) {
	f, srv := newFake(t)
	var resumes atomic.Int32
	var callID atomic.Value
	f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
		callID.Store(string(m.ID))
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("id: e0\nretry: 10\ndata: \n\n")) // priming event, then closed: poll
		w.(http.Flusher).Flush()
	}
	f.getReply = func(w http.ResponseWriter, r *http.Request) {
		last := r.Header.Get("Last-Event-Id")
		if last == "" {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		n := resumes.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		if n < 3 { // the tool is still running: a progress event, then closed again
			writeEvent(w, "e"+strconv.Itoa(int(n)), jsonrpc.Notification("notifications/progress", json.RawMessage(`{"progressToken":1,"progress":`+strconv.Itoa(int(n))+`}`)))
			return
		}
		writeEvent(w, "e3", jsonrpc.Response(json.RawMessage(callID.Load().(string)), json.RawMessage(`{"content":[]}`)))
	}
	s := session(t, upstream(t, srv.URL, Config{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"slow"}`))
	if err != nil {
		t.Fatalf("a call the server answered after polling: %v (%d resumptions, %d POSTs)", err, resumes.Load(), f.count("tools/call"))
	}
	if string(res) != `{"content":[]}` || f.count("tools/call") != 1 {
		t.Fatalf("result %s after %d POSTs", res, f.count("tools/call"))
	}
}
