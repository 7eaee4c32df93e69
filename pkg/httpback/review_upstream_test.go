package httpback

import (
	"encoding/json"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
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
		var gets atomic.Int32
		f.call = cutAfterAnEvent
		f.getReply = func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Last-Event-Id") != "e1" {
				w.WriteHeader(http.StatusMethodNotAllowed)
				return
			}
			if gets.Add(1) == 1 {
				http.Error(w, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Conflict: Stream already has an active connection"}}`, code)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "e2", jsonrpc.Response(json.RawMessage(`2`), json.RawMessage(`{"content":[],"ok":true}`)))
		}
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
