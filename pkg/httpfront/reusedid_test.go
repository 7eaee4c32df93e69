package httpfront_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// A request whose client hung up is still being served: its id stays taken until the proxy
// has answered it. A different request sent under that id meanwhile is refused (400), never
// handed the first request's answer; the same request re-sent under it (a client retrying
// its POST) takes over the wait and receives the answer of the one execution, fenced or
// passed through.
func TestReusedIDOfAHungUpRequest(t *testing.T) {
	fencedAndPassed(t, func(t *testing.T, g *gw) {
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

// TestResentWhileTheFirstPostIsConnected: a client's retry of its POST can reach the gateway
// before the gateway has noticed the first POST's connection end (a cut the client saw may
// arrive late at the gateway, or never, when it was silent). docs/gateway.md: "the same
// message POSTed again byte for byte waits for the one answer". Here the first POST stays
// connected: the re-sent one joins its wait, both receive the answer of the one execution,
// and another request under the id is refused meanwhile. Before, the re-send was refused
// (400, "already in progress") until the gateway saw the first client go.
func TestResentWhileTheFirstPostIsConnected(t *testing.T) {
	fencedAndPassed(t, func(t *testing.T, g *gw) {
		sid := g.open(nil)
		first := call(9, "slow", `{"ms":2500,"tag":"twice"}`)
		type posted struct {
			r   reply
			err error
		}
		firstDone := make(chan posted, 1)
		go func() {
			r, err := g.post(context.Background(), sid, nil, first)
			firstDone <- posted{r, err}
		}()
		waitLog(t, g, "slow tag=twice started")

		r := g.mustPost(sid, nil, call(9, "slow", `{"ms":10,"tag":"other"}`))
		if r.status != http.StatusBadRequest || !strings.Contains(r.raw[0], "already in progress") {
			t.Fatalf("another call under the id of one still served: status %d %v, want 400 (already in progress)", r.status, r.raw)
		}
		again := g.mustPost(sid, nil, first)
		if again.status != http.StatusOK {
			t.Fatalf("the same call re-sent under its id while its first POST is connected: status %d %v", again.status, again.raw)
		}
		want := resultText(t, again.last(t))
		if !strings.HasPrefix(want, "slow done n=1 ") {
			t.Fatalf("the re-sent call was answered %q, want the first execution's result", want)
		}
		var f posted
		select {
		case f = <-firstDone:
		case <-time.After(time.Minute):
			t.Fatal("the first POST got no answer within a minute of the re-sent one's")
		}
		if f.err != nil || f.r.status != http.StatusOK {
			t.Fatalf("the first POST: status %d, %v", f.r.status, f.err)
		}
		if got := resultText(t, f.r.last(t)); got != want {
			t.Fatalf("the first POST was answered %q, the re-sent one %q: want the one answer for both", got, want)
		}
		if n := strings.Count(g.log.String(), "slow tag=twice started"); n != 1 {
			t.Fatalf("the call started %d times, want 1", n)
		}
		if strings.Contains(g.log.String(), "slow tag=other started") {
			t.Fatal("the refused call ran")
		}
		// Once answered, the id is free again.
		r = g.mustPost(sid, nil, call(9, "echo", `{"text":"mine"}`))
		if text := resultText(t, r.last(t)); text != "echo mine" {
			t.Fatalf("a call under the freed id was answered %q, want its own answer", text)
		}
	})
}

// fencedAndPassed runs test, in parallel, on a gateway that fences the tool slow and on one
// that passes it through unfenced (--pass).
func fencedAndPassed(t *testing.T, test func(t *testing.T, g *gw)) {
	t.Parallel()
	for _, pass := range []bool{false, true} {
		name := "fenced"
		if pass {
			name = "passed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newGW(t, func(_ *httpfront.Config, o *wrap.Options) {
				if pass {
					o.Pass = []string{"slow"}
				}
			}))
		})
	}
}

// The same message POSTed many times at once, under one id, from as many connections (a
// client library retrying over a pool, or a hostile one): the gateway forwards it once, and
// every POST receives the one answer. A tool the gateway passes unfenced (--pass) has only
// the session's id bookkeeping between it and a second run, so both are checked.
func TestConcurrentIdenticalPostsRunOnce(t *testing.T) {
	fencedAndPassed(t, func(t *testing.T, g *gw) {
		sid := g.open(nil)
		body := call(77, "slow", `{"ms":800,"tag":"burst"}`)
		const n = 16
		start := make(chan struct{})
		answers := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r, err := g.post(context.Background(), sid, nil, body)
				switch {
				case err != nil:
					t.Error(err)
				case r.status != http.StatusOK || len(r.msgs) == 0:
					t.Errorf("POST %d: status %d %v", i, r.status, r.raw)
				case string(r.last(t)["id"]) != "77":
					t.Errorf("POST %d answered under id %s", i, r.last(t)["id"])
				default:
					answers[i] = resultText(t, r.last(t))
				}
			}()
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			return
		}
		for i, a := range answers {
			if !strings.HasPrefix(a, "slow done n=1 ") || a != answers[0] {
				t.Fatalf("POST %d was answered %q, POST 0 %q: want the one execution's answer for all", i, a, answers[0])
			}
		}
		if c := strings.Count(g.log.String(), "slow tag=burst started"); c != 1 {
			t.Fatalf("the call started %d times for %d identical POSTs under one id, want 1", c, n)
		}
	})
}
