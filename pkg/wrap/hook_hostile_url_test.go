package wrap_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// A webhook endpoint is another team's server and may hang or answer with garbage
// (docs/policy.md: timeout bounds one delivery; delivering never delays the agent's answer).
// Real HTTP endpoints, the proxy in front of the real test server process.
func TestOnUnknownHookURLHangsOrAnswersGarbage(t *testing.T) {
	t.Parallel()
	t.Run("hangs: the agent is answered meanwhile", func(t *testing.T) {
		t.Parallel()
		var got atomic.Int32
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			got.Add(1)
			_, _ = io.ReadAll(req.Body) // then the server sees the client go away
			select {
			case <-release:
			case <-req.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		r := newRig(t)
		x, _ := r.inproc(wrap.Options{OnUnknown: &wrap.Hook{URL: srv.URL, Timeout: time.Hour}}, initNoElicit, nil)
		unknownCall(t, x)
		waitFor(t, "the hook's request", func() bool { return got.Load() > 0 })
		if res := x.call("charge", `{"amount":3}`); res.IsError {
			t.Fatalf("a call while the webhook hangs: %+v", res)
		}
		if res := x.call("die", `{"tag":"s3cret-tag"}`); !res.IsError || string(res.Meta["effectfence/code"]) != `"prior_failure"` {
			t.Fatalf("the refusal while the webhook hangs: %+v", res)
		}
		x.close()
	})
	t.Run("hangs: the timeout ends the delivery", func(t *testing.T) {
		t.Parallel()
		var got atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			got.Add(1)
			_, _ = io.ReadAll(req.Body)
			<-req.Context().Done()
		}))
		defer srv.Close()
		r := newRig(t)
		x, _ := r.inproc(wrap.Options{OnUnknown: &wrap.Hook{URL: srv.URL, Timeout: time.Second, Retries: 1}}, initNoElicit, nil)
		intent := unknownCall(t, x)
		waitFor(t, "both deliveries to end", func() bool {
			return strings.Contains(x.log.String(), "on_unknown hook for intent "+intent+" failed after 2 attempt(s)")
		})
		x.close()
		if n := got.Load(); n != 2 || !strings.Contains(x.log.String(), "deadline exceeded") {
			t.Fatalf("%d requests (want 2), log:\n%s", n, x.log.String())
		}
	})
	t.Run("answers garbage", func(t *testing.T) {
		t.Parallel()
		var got atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			got.Add(1)
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			_, _ = buf.WriteString("HTTP/1.1 2x0 \x1b[2Kdelivered\r\n\r\n")
			_ = buf.Flush()
		}))
		defer srv.Close()
		r := newRig(t)
		x, _ := r.inproc(wrap.Options{OnUnknown: &wrap.Hook{URL: srv.URL, Retries: 1}}, initNoElicit, nil)
		intent := unknownCall(t, x)
		waitFor(t, "both deliveries to end", func() bool {
			return strings.Contains(x.log.String(), "on_unknown hook for intent "+intent+" failed after 2 attempt(s)")
		})
		x.close()
		if n := got.Load(); n != 2 || strings.Contains(x.log.String(), "\x1b") {
			t.Fatalf("%d requests (want 2), and the answer's escape must not reach the log:\n%q", n, x.log.String())
		}
	})
}
