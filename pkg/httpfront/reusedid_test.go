package httpfront_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// A request whose client hung up is still being served: its id stays taken until the proxy
// has answered it. A different request sent under that id meanwhile is refused (400), never
// handed the first request's answer; the same request re-sent under it (a client retrying
// its POST) takes over the wait and receives the answer of the one execution, fenced or
// passed through.
func TestReusedIDOfAHungUpRequest(t *testing.T) {
	t.Parallel()
	for _, pass := range []bool{false, true} {
		name := "fenced"
		if pass {
			name = "passed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) {
				if pass {
					o.Pass = []string{"slow"}
				}
			})
			sid := g.open(nil)
			// Long enough that the steps below, on a loaded machine, happen while it runs.
			first := call(7, "slow", `{"ms":2500,"tag":"reused"}`)
			ctx, hangUp := context.WithCancel(context.Background())
			hungUp := make(chan struct{})
			go func() {
				defer close(hungUp)
				_, _ = g.post(ctx, sid, nil, first)
			}()
			waitLog(t, g, "slow tag=reused started")
			hangUp()
			<-hungUp

			// Another call under the same id while the first still runs, slower than what
			// is left of the first: before, it was handed the first call's answer, and its
			// own was dropped.
			r := g.mustPost(sid, nil, call(7, "slow", `{"ms":4000,"tag":"other"}`))
			if r.status != http.StatusBadRequest || !strings.Contains(r.raw[0], "already in progress") {
				t.Fatalf("another call under the id of one still served: status %d %v, want 400 (already in progress)", r.status, r.raw)
			}

			// The same call re-sent under the same id: the first execution's answer.
			r = g.mustPost(sid, nil, first)
			if r.status != http.StatusOK {
				t.Fatalf("the same call re-sent under its id: status %d %v", r.status, r.raw)
			}
			if text := resultText(t, r.last(t)); !strings.HasPrefix(text, "slow done n=1 ") {
				t.Fatalf("the re-sent call was answered %q, want the first execution's result", text)
			}

			// Once answered, the id is free again.
			r = g.mustPost(sid, nil, call(7, "echo", `{"text":"mine"}`))
			if text := resultText(t, r.last(t)); text != "echo mine" {
				t.Fatalf("a call under the freed id was answered %q, want its own answer", text)
			}
			if n := strings.Count(g.log.String(), "slow tag=reused started"); n != 1 {
				t.Fatalf("the call started %d times, want 1", n)
			}
			if strings.Contains(g.log.String(), "slow tag=other started") {
				t.Fatal("the refused call ran")
			}
		})
	}
}
