package httpfront_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// docs/gateway.md, "A broken stream is not a failure" and --max-sessions: a DELETE ends the
// session, its server getting the grace for the calls in flight. A call in flight when its
// session is deleted is neither lost nor run twice: its POST, as an event stream or as JSON,
// receives the call's own answer when it ends within the grace, or the unknown outcome it is
// recorded with when it does not; the session's open GET stream ends; the session's id is
// 404 for every method afterwards; and the same call from a new session is replayed (or, when
// unknown, refused as a prior failure), never started again.
func TestDeleteWhileCallsAndGETStreamAreOpen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		grace time.Duration
		ms    int
	}{
		{"the calls end within the grace", 20 * time.Second, 1500},
		{"the grace ends first", 300 * time.Millisecond, 20000},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) { o.Grace = c.grace })
			sid := g.open(nil)
			get, _ := openGET(t, g, sid)
			getEnded := make(chan error, 1)
			go func() { _, err := io.Copy(io.Discard, get.Body); getEnded <- err }()

			accepts := []string{"application/json, text/event-stream", "application/json"}
			bodies := make([]string, len(accepts))
			answers := make([]chan reply, len(accepts))
			for i, accept := range accepts {
				bodies[i] = call(10+i, "slow", fmt.Sprintf(`{"ms":%d,"tag":"deleted%d"}`, c.ms, i))
				answers[i] = make(chan reply, 1)
				go func() {
					r, err := g.post(context.Background(), sid, hdr{"Accept": accept}, bodies[i])
					if err != nil {
						t.Error(err)
					}
					answers[i] <- r
				}()
			}
			for i := range accepts {
				waitLog(t, g, fmt.Sprintf("slow tag=deleted%d started", i))
			}
			g.deleteSession(t, sid)

			for i, accept := range accepts {
				var r reply
				select {
				case r = <-answers[i]:
				case <-time.After(time.Minute):
					t.Fatalf("Accept %q: the call of the deleted session was never answered", accept)
				}
				if r.status != http.StatusOK || len(r.msgs) == 0 || string(r.last(t)["id"]) != fmt.Sprint(10+i) {
					t.Fatalf("Accept %q: the call of the deleted session was answered %d %v, want its own answer", accept, r.status, r.raw)
				}
				last := r.raw[len(r.raw)-1]
				if c.ms < 10000 {
					if text := resultText(t, r.last(t)); !strings.HasPrefix(text, "slow done n=") {
						t.Fatalf("Accept %q: answered %q, want the call's result", accept, text)
					}
				} else if !strings.Contains(last, "unknown") {
					t.Fatalf("Accept %q: answered %s, want the unknown outcome", accept, last)
				}
			}
			select {
			case <-getEnded:
			case <-time.After(time.Minute):
				t.Fatal("the deleted session's GET stream is still open")
			}
			for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
				req, _ := http.NewRequest(m, g.url, strings.NewReader(bodies[0]))
				req.Header.Set("Mcp-Session-Id", sid)
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Fatalf("%s naming the deleted session: status %d, want 404", m, resp.StatusCode)
				}
			}
			other := g.open(nil)
			for i := range accepts {
				r := g.mustPost(other, nil, bodies[i])
				last := r.raw[len(r.raw)-1]
				if c.ms < 10000 && !strings.Contains(last, "effectfence/replayed") {
					t.Fatalf("the same call from a new session: %s, want the recorded result replayed", last)
				}
				if c.ms >= 10000 && !strings.Contains(last, "prior_failure") {
					t.Fatalf("the same call from a new session: %s, want a prior_failure refusal", last)
				}
				if n := strings.Count("\n"+g.log.String(), fmt.Sprintf("\nmcptest: slow tag=deleted%d started", i)); n != 1 {
					t.Fatalf("call %d started %d times, want 1", i, n)
				}
			}
		})
	}
}

// A DELETE that races the session's requests: POSTs of fenced calls sent at the moment the
// session is deleted, so that some pass the lookup before the DELETE and are dispatched while
// the session's server stops. The grace is long enough for every call admitted to end: every
// POST is answered (none hangs), and what it says is what happened: a charge answered as
// charged ran exactly once, one answered 404 or "NOT executed" did not run at all; none is
// left unknown and none ran twice. The same charges sent again from a new session are replayed
// where they ran and run (once) where they did not. Each session's server is its own stdio
// child, or an upstream session on one mcptest server over Streamable HTTP (--upstream).
func TestDeleteRacesPosts(t *testing.T) {
	t.Parallel()
	for _, back := range []string{"stdio", "http"} {
		t.Run(back, func(t *testing.T) {
			t.Parallel()
			deleteRacesPosts(t, back)
		})
	}
}

func deleteRacesPosts(t *testing.T, back string) {
	dir := t.TempDir()
	led, err := store.Open(context.Background(), store.Options{Ledger: filepath.Join(dir, "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	effects := filepath.Join(dir, "effects")
	var upstream string
	if back == "http" {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		u, stop := startProcT(t, append(mcptest.Env(effects, ""), mcptest.EnvHTTP+"=127.0.0.1:0"), "mcptest: listening on ", exe, "-test.run=^$")
		t.Cleanup(stop)
		upstream = u
	}
	g := newGWOn(t, led, effects, func(_ *httpfront.Config, o *wrap.Options) {
		o.Grace = 30 * time.Second
		if upstream != "" {
			o.Backend = wrap.Upstream(upstream, nil)
		}
	})
	const rounds, n = 4, 12
	var mu sync.Mutex
	ran := map[int]bool{} // amount: answered as charged
	var notFound, notRun int
	for round := range rounds {
		sid := g.open(nil)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			amount := 1 + round*n + i
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				if i%3 == 0 {
					time.Sleep(time.Duration(i) * 100 * time.Microsecond)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				r, err := g.post(ctx, sid, nil, call(amount, "charge", fmt.Sprintf(`{"amount":%d}`, amount)))
				if err != nil {
					t.Errorf("charge %d: %v", amount, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch all := strings.Join(r.raw, "\n"); {
				case r.status == http.StatusNotFound:
					notFound++
				case r.status == http.StatusOK && strings.Contains(all, fmt.Sprintf("charged %d as", amount)):
					ran[amount] = true
				case r.status == http.StatusOK && strings.Contains(all, "NOT executed") && !strings.Contains(all, "unknown"):
					notRun++
				default:
					t.Errorf("charge %d: status %d %v", amount, r.status, r.raw)
				}
			}()
		}
		close(start)
		time.Sleep(time.Duration(round) * 500 * time.Microsecond)
		g.deleteSession(t, sid)
		wg.Wait()
	}
	t.Logf("of %d charges, %d ran, %d were refused NOT executed (the session stopping), %d got 404", rounds*n, len(ran), notRun, notFound)
	ranTimes := func() map[int]int {
		counts := map[int]int{}
		for _, e := range mcptest.Effects(g.effects) {
			var amount int
			if _, err := fmt.Sscanf(e, "charge amount=%d", &amount); err == nil {
				counts[amount]++
			}
		}
		return counts
	}
	counts := ranTimes()
	for amount := 1; amount <= rounds*n; amount++ {
		if want := map[bool]int{true: 1, false: 0}[ran[amount]]; counts[amount] != want {
			t.Errorf("charge %d: answered as charged %v, ran %d times", amount, ran[amount], counts[amount])
		}
	}
	if t.Failed() {
		return
	}
	sid := g.open(nil)
	for amount := 1; amount <= rounds*n; amount++ {
		r := g.mustPost(sid, nil, call(1000+amount, "charge", fmt.Sprintf(`{"amount":%d}`, amount)))
		last := r.raw[len(r.raw)-1]
		if replayed := strings.Contains(last, "effectfence/replayed"); replayed != ran[amount] || !strings.Contains(last, fmt.Sprintf("charged %d as", amount)) {
			t.Errorf("charge %d again (ran before: %v): %s", amount, ran[amount], last)
		}
	}
	for amount, c := range ranTimes() {
		if c != 1 {
			t.Errorf("charge %d ran %d times in all, want 1", amount, c)
		}
	}
}

// A session deleted with a call in flight on an event stream and its GET stream open leaves
// no goroutine behind once its server has stopped and the client's connections are closed:
// not the streams' writers, the proxy's workers, nor the child's readers.
func TestDeleteLeavesNoGoroutines(t *testing.T) {
	g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) { o.Grace = 5 * time.Second })
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	settle := func() int {
		tr.CloseIdleConnections()
		http.DefaultClient.CloseIdleConnections()
		runtime.GC()
		return runtime.NumGoroutine()
	}
	// A first session, opened and deleted, starts what lasts as long as the gateway.
	g.deleteSession(t, g.open(nil))
	time.Sleep(time.Second)
	before := settle()

	sid := g.open(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, g.url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	get, err := client.Do(req)
	if err != nil || get.StatusCode != http.StatusOK {
		t.Fatalf("GET: %v %v", get, err)
	}
	getEnded := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, get.Body); get.Body.Close(); close(getEnded) }()
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(call(2, "slow", `{"ms":500,"tag":"leak"}`)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	waitLog(t, g, "slow tag=leak started")
	g.deleteSession(t, sid)
	for _, ch := range []chan struct{}{posted, getEnded} {
		select {
		case <-ch:
		case <-time.After(time.Minute):
			t.Fatal("the deleted session's POST or GET stream is still open")
		}
	}
	var now int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if now = settle(); now <= before {
			return
		}
	}
	buf := make([]byte, 1<<20)
	t.Fatalf("%d goroutines after the deleted session ended, %d before it opened:\n%s", now, before, buf[:runtime.Stack(buf, true)])
}

// A session deleted while its initialize is still unanswered (a server that never finishes
// its handshake): the client has the session's id from the event stream's headers, sent
// before the answer. The DELETE stops the server after the grace, and the initialize's stream
// ends then, instead of waiting for the handshake's own bound (60 s); the session is gone.
func TestDeleteDuringTheHandshake(t *testing.T) {
	t.Parallel()
	g := newGW(t, func(_ *httpfront.Config, o *wrap.Options) {
		o.Env = mcptest.Env(filepath.Join(t.TempDir(), "effects"), "mute")
	})
	req, _ := http.NewRequest(http.MethodPost, g.url, strings.NewReader(initBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize of a mute server: status %d, session %q", resp.StatusCode, sid)
	}
	ended := make(chan string, 1)
	go func() { b, _ := io.ReadAll(resp.Body); ended <- string(b) }()
	start := time.Now()
	g.deleteSession(t, sid)
	select {
	case b := <-ended:
		t.Logf("the initialize's stream ended %s after the DELETE: %.300s", time.Since(start), b)
	case <-time.After(30 * time.Second):
		t.Fatal("the deleted session's initialize is still waiting 30 s after the DELETE")
	}
	if r := g.mustPost(sid, nil, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); r.status != http.StatusNotFound {
		t.Fatalf("the deleted session: status %d, want 404", r.status)
	}
	if n := g.front.Sessions(); n != 0 {
		t.Fatalf("%d sessions open, want 0", n)
	}
}
