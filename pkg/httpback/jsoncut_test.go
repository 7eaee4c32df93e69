package httpback

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// TestJSONAnswerCutAfterItsValueStands: a JSON answer whose value came whole, with nothing but
// whitespace after it, and whose connection then broke off (the server killed once it wrote
// its answer, before the chunked body's last chunk) is the call's response. Before
// 2026-12-07 the call was "may have run": a call that ran and answered was fenced unknown and
// its result lost. Anything else after the value still makes the answer invalid.
func TestJSONAnswerCutAfterItsValueStands(t *testing.T) {
	f, srv := newFake(t)
	var log syncBuffer
	s := session(t, upstream(t, srv.URL, Config{Log: &log}))
	for _, after := range []string{"", "\r\n ", `{"jsonrpc"`} {
		f.mu.Lock()
		f.call = func(w http.ResponseWriter, r *http.Request, m *jsonrpc.Message) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(jsonrpc.Response(m.ID, json.RawMessage(`{"content":[{"type":"text","text":"charged"}]}`)))
			w.Write([]byte(after))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // the connection closes without the body's last chunk
		}
		f.mu.Unlock()
		res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"pay"}`))
		if strings.TrimSpace(after) != "" {
			mayHaveRun(t, err)
			continue
		}
		if err != nil || string(res) != `{"content":[{"type":"text","text":"charged"}]}` {
			t.Fatalf("after %q, then the connection cut: %s %v; want the response", after, res, err)
		}
	}
	if !strings.Contains(log.String(), "broke off after the response") {
		t.Fatalf("the log does not say the body broke off:\n%s", log.String())
	}
}
