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

// An event id that HTTP cannot carry back as Last-Event-ID (a control character; the event
// stream allows any but NUL), or one longer than the server takes in a header (it answers
// 431): the server's GET stream, cut after it, is asked for again without resuming, as when
// the server refuses the resumption, and not given up for the session's life nor retried in
// vain with the same id.
func TestUnsendableEventIDOfTheGETStream(t *testing.T) {
	for name, id := range map[string]string{
		"control character":    "g\x01",
		"longer than a header": strings.Repeat("9", 2<<20),
	} {
		t.Run(name, func(t *testing.T) {
			f, srv := newFake(t)
			var n atomic.Int32
			f.getReply = func(w http.ResponseWriter, r *http.Request) {
				switch n.Add(1) {
				case 1: // a stream with the event id, then its end
					w.Header().Set("Content-Type", "text/event-stream")
					writeEvent(w, id, jsonrpc.Notification("notifications/tools/list_changed", nil))
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
			deadline := time.Now().Add(20 * time.Second)
			for n.Load() < 2 {
				if time.Now().After(deadline) {
					t.Fatalf("%d GETs 20 s after the session started; want the stream opened again after its end", n.Load())
				}
				time.Sleep(10 * time.Millisecond)
			}
			f.mu.Lock()
			again := f.gets[len(f.gets)-1].Get("Last-Event-Id")
			f.mu.Unlock()
			if again != "" {
				t.Fatalf("the stream was opened again with Last-Event-ID %.20q, want none", again)
			}
			if u.Current() != s || s.Err() != nil {
				t.Fatalf("the session was retired (%v)", s.Err())
			}
			if _, err := s.Call(context.Background(), "ping", nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}
