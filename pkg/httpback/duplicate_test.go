package httpback

import (
	"fmt"
	"io"
	"net/http"

	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// A result is handed on as the exact bytes the server wrote, numbers beyond 2^53 and beyond
// float64, escapes and duplicate members inside the result included, in a JSON answer and in
// an event stream. A response whose envelope has a member twice ("result", "id") is read
// differently by different parsers: the call may have run, and does not wait on a stream the
// server keeps open.
func TestResultBytesAndDuplicateMembers(t *testing.T) {
	f, srv := newFake(t)
	s := session(t, upstream(t, srv.URL, Config{}))
	result := `{"n":123456789012345678901234567890,"m":9007199254740993,"f":1e400,"s":"\u00e9\ud83d\ude00","d":1,"d":2}`
	for _, mode := range []string{"json", "sse"} {
		send := func(w http.ResponseWriter, r *http.Request, msg string) {
			if mode == "json" {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, msg)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvent(w, "", []byte(msg))
			<-r.Context().Done() // the stream stays open
		}
		f.mu.Lock()
		f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			send(w, r, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":`+result+`}`)
		}
		f.mu.Unlock()
		res, err := callWithin(t, s, "%s: the call waited 30 s", mode)
		if err != nil || string(res) != result {
			t.Fatalf("%s: %s, %v; want the result byte for byte", mode, res, err)
		}
		for name, msg := range map[string]string{
			"two results":      `{"jsonrpc":"2.0","id":%[1]s,"result":{"paid":false},"result":{"paid":true}}`,
			"two ids":          `{"jsonrpc":"2.0","id":%[1]s,"id":%[1]s,"result":{}}`,
			"another id first": `{"jsonrpc":"2.0","id":999,"id":%[1]s,"result":{}}`,
		} {
			f.mu.Lock()
			f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
				send(w, r, fmt.Sprintf(msg, m.ID))
			}
			f.mu.Unlock()
			_, err := callWithin(t, s, "%s, %s: the call waited 30 s after the server answered it", mode, name)
			mayHaveRun(t, err)
		}
	}
}
