package httpback

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// getCutter is a proxy in front of a real server that cuts the session's first GET stream
// (on both sides: the server sees it end) at its cutN-th event whose data holds cutAt, which
// it does not pass on, and counts the event ids of method it passed on GET streams.
type getCutter struct {
	t      *testing.T
	rp     *httputil.ReverseProxy
	cutAt  string
	cutN   int
	method string

	gets      atomic.Int32
	resumes   atomic.Int32
	fresh     atomic.Int32 // GET streams opened without Last-Event-ID after the first
	mu        sync.Mutex
	ids       map[string]int // event ids of method passed on GET streams, and how often
	onResumed atomic.Int32   // events of method passed on resumptions
}

func newGetCutter(t *testing.T, target, cutAt string, cutN int, method string) (*getCutter, *httptest.Server) {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = ""
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0) // the cut is on purpose
	c := &getCutter{t: t, rp: rp, cutAt: cutAt, cutN: cutN, method: method, ids: map[string]int{}}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return c, srv
}

func (c *getCutter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		c.rp.ServeHTTP(w, r)
		return
	}
	resumed := r.Header.Get(headerLastEventID) != ""
	if resumed {
		c.resumes.Add(1)
	}
	first := c.gets.Add(1) == 1
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	seen := 0
	ew := &eventWatch{ResponseWriter: w, opened: func() {
		if !first && !resumed {
			c.fresh.Add(1)
		}
	}, seen: func(id string, data []byte) bool {
		if first && bytes.Contains(data, []byte(c.cutAt)) {
			if seen++; seen == c.cutN {
				cancel()
				return true
			}
		}
		if bytes.Contains(data, []byte(`"`+c.method+`"`)) && id != "" {
			c.mu.Lock()
			c.ids[id]++
			c.mu.Unlock()
			if resumed {
				c.onResumed.Add(1)
			}
		}
		return false
	}}
	c.rp.ServeHTTP(ew, r.WithContext(ctx))
	if ew.cut {
		panic(http.ErrAbortHandler)
	}
}

// passed is how many distinct events of method the proxy passed on GET streams, and how many
// of them it passed more than once.
func (c *getCutter) passed() (distinct, again int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range c.ids {
		if n > 1 {
			again++
		}
	}
	return len(c.ids), again
}

// eventWatch passes an event stream on whole events at a time, after asking seen of each (its
// id and data): once seen returns true, that event and all after it are not passed.
type eventWatch struct {
	http.ResponseWriter
	opened func() // the stream was opened (HTTP 200)
	seen   func(id string, data []byte) bool
	buf    []byte
	cut    bool
}

func (e *eventWatch) Write(p []byte) (int, error) {
	if e.cut {
		return 0, http.ErrAbortHandler
	}
	e.buf = append(e.buf, p...)
	for {
		end := bytes.Index(e.buf, []byte("\n\n"))
		if end < 0 {
			return len(p), nil
		}
		ev := e.buf[:end+2]
		var id string
		var data []byte
		for _, ln := range strings.Split(string(ev), "\n") {
			if v, ok := strings.CutPrefix(ln, "id: "); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(ln, "data: "); ok {
				data = append(data, v...)
			}
		}
		if e.seen(id, data) {
			e.cut = true
			return len(p), nil
		}
		if _, err := e.ResponseWriter.Write(ev); err != nil {
			return 0, err
		}
		e.Flush()
		e.buf = e.buf[end+2:]
	}
}

func (e *eventWatch) Flush() { e.ResponseWriter.(http.Flusher).Flush() }

func (e *eventWatch) WriteHeader(code int) {
	if code == http.StatusOK {
		e.opened()
	}
	e.ResponseWriter.WriteHeader(code)
}

// TestEverythingGETStreamAfterAResumptionNeverFed: the real server-everything (Streamable
// HTTP), its session's GET stream cut by a proxy at the second simulated log message, which
// does not get through. Its event store makes the SDK file the resumed stream under an event's
// id, not the session's stream's (docs/gateway-backend.md): the resumption is accepted,
// replays what was stored (the message the cut kept back), and is never fed, while the server
// keeps what it sends the session for a stream it no longer has. The session opens a fresh
// GET stream beside the resumption, and the log messages after the cut reach it; each
// message the proxy passed is delivered once. Before, every message the server sent the
// session after the cut was lost (0 in 20 s when first seen; 1 message in 2 minutes here): a
// notifications/tools/list_changed so lost leaves wrap fencing by a stale tool list.
func TestEverythingGETStreamAfterAResumptionNeverFed(t *testing.T) {
	t.Parallel()
	e := startEverything(t, 0)
	c, proxy := newGetCutter(t, e.url(), `"notifications/message"`, 2, "notifications/message")
	var logs atomic.Int32
	u := upstream(t, proxy.URL+"/mcp", Config{Init: everythingInit, Log: &testLog{t}, OnNotification: func(method string, _ json.RawMessage) {
		if method == "notifications/message" {
			logs.Add(1)
		}
	}})
	s := session(t, u)
	toggle := func() {
		if _, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"toggle-simulated-logging","arguments":{}}`)); err != nil {
			t.Fatal(err)
		}
	}
	toggle()
	// One at once and then one every 5 s: the second is replayed, two more come after it.
	for deadline := time.Now().Add(2 * time.Minute); logs.Load() < 4; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d log messages of the server's in 2 minutes (one every 5 s), GETs %d of which resumptions %d: want the messages after the cut delivered", logs.Load(), c.gets.Load(), c.resumes.Load())
		}
	}
	toggle()
	if c.onResumed.Load() == 0 {
		t.Fatalf("%d resumptions of the cut GET stream, and none replayed the message the cut kept back: the test did not meet the server it means to", c.resumes.Load())
	}
	// What the proxy passed is delivered once: wait for the last in flight.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		distinct, again := c.passed()
		if int(logs.Load()) == distinct {
			t.Logf("%d log messages delivered, %d passed again on a resumption; GETs %d, resumptions %d", distinct, again, c.gets.Load(), c.resumes.Load())
			break
		}
		if int(logs.Load()) > distinct || time.Now().After(deadline) {
			t.Fatalf("%d log messages delivered, %d distinct passed by the proxy: want each delivered once", logs.Load(), distinct)
		}
	}
}

// TestEverythingServerRequestAfterAResumptionNeverFed: as above, with a request of the
// server's. server-everything asks a client that has roots for them (roots/list, on the
// session's GET stream) after initialize and after each notifications/roots/list_changed, and
// logs "Roots updated" once answered. The proxy cuts the first GET stream at that log message;
// the resumption replays it, and the request the server sends after the next list_changed
// comes on the fresh stream: OnRequest answers it, once, and the server's log of the answer
// arrives. Before, the request went to no stream and the server waited for an answer that
// could not come.
func TestEverythingServerRequestAfterAResumptionNeverFed(t *testing.T) {
	e := startEverything(t, 0)
	c, proxy := newGetCutter(t, e.url(), "Roots updated", 1, "roots/list")
	var asked, updated atomic.Int32
	u := upstream(t, proxy.URL+"/mcp", Config{
		Init: json.RawMessage(`{"protocolVersion":"2025-06-18","capabilities":{"roots":{"listChanged":true}},"clientInfo":{"name":"httpback-test","version":"1"}}`),
		Log:  &testLog{t},
		OnNotification: func(method string, p json.RawMessage) {
			if method == "notifications/message" && strings.Contains(string(p), "Roots updated") {
				updated.Add(1)
			}
		},
		OnRequest: func(_ context.Context, method string, _ json.RawMessage) (json.RawMessage, error) {
			if method == "roots/list" {
				asked.Add(1)
			}
			return json.RawMessage(`{"roots":[{"uri":"file:///tmp","name":"tmp"}]}`), nil
		},
	})
	s := session(t, u)
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("a minute without %s (roots/list answered %d, Roots updated %d, GETs %d, resumptions %d, fresh streams %d)", what, asked.Load(), updated.Load(), c.gets.Load(), c.resumes.Load(), c.fresh.Load())
			}
		}
	}
	waitFor("the log message the cut kept back, replayed", func() bool { return asked.Load() == 1 && updated.Load() == 1 })
	waitFor("a fresh GET stream beside the resumption", func() bool { return c.fresh.Load() > 0 })
	if err := s.Notify("notifications/roots/list_changed", nil); err != nil {
		t.Fatal(err)
	}
	waitFor("the server's second roots/list answered and its log of the answer", func() bool { return asked.Load() == 2 && updated.Load() == 2 })
	if c.resumes.Load() == 0 {
		t.Fatal("the cut GET stream was not resumed: the test did not meet the server it means to")
	}
	// Each request answered once, also one a resumption passed again.
	if distinct, _ := c.passed(); distinct != 2 || asked.Load() != 2 {
		t.Fatalf("the proxy passed %d roots/list requests, OnRequest answered %d; want 2 and 2", distinct, asked.Load())
	}
}

// startFed runs testdata/fed_server.mjs (the TypeScript SDK with an event store that feeds a
// resumed stream) and returns its URL.
func startFed(t *testing.T) string {
	t.Helper()
	peers, _ := filepath.Abs("../../.peers")
	if _, err := os.Stat(filepath.Join(peers, "node_modules/@modelcontextprotocol/sdk/package.json")); err != nil {
		t.Skip("skipping: the TypeScript SDK is not installed; run scripts/install-peers")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("skipping: node is not installed")
	}
	cmd := exec.Command(node, "testdata/fed_server.mjs")
	cmd.Env = append(os.Environ(), "PEERS="+peers)
	cmd.Stderr = &testLog{t}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("fed_server.mjs exited before it listened")
	}
	go io.Copy(io.Discard, out)
	return "http://127.0.0.1:" + strings.TrimSpace(sc.Text()) + "/mcp"
}

// TestFedResumptionOfTheGETStreamGoesOnAlone: the real TypeScript SDK with an event store
// that feeds a resumption (fed_server.mjs), its session's GET stream cut by a proxy at the
// second log message, which does not get through. The resumption replays it and is fed from
// then on, and the server refuses the fresh stream asked for beside it (409): no fresh stream
// is opened, and every message the server sent is delivered once, in order, none lost, the
// ones sent while no stream was open included.
func TestFedResumptionOfTheGETStreamGoesOnAlone(t *testing.T) {
	t.Parallel()
	c, proxy := newGetCutter(t, startFed(t), `"tick 2"`, 1, "notifications/message")
	var mu sync.Mutex
	var ticks []string
	u := upstream(t, proxy.URL+"/mcp", Config{Log: &testLog{t}, OnNotification: func(method string, p json.RawMessage) {
		var m struct{ Data string }
		if method == "notifications/message" && json.Unmarshal(p, &m) == nil {
			mu.Lock()
			ticks = append(ticks, m.Data)
			mu.Unlock()
		}
	}})
	s := session(t, u)
	call := func(name string) string {
		res, err := s.Call(context.Background(), "tools/call", json.RawMessage(`{"name":"`+name+`","arguments":{}}`))
		if err != nil {
			t.Fatal(err)
		}
		return string(res)
	}
	call("start")
	delivered := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ticks)
	}
	for deadline := time.Now().Add(time.Minute); delivered() < 12; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d log messages in a minute (one every 300 ms; GETs %d, resumptions %d)", delivered(), c.gets.Load(), c.resumes.Load())
		}
	}
	res := call("stop")
	var sent int
	if i := strings.Index(res, "stopped after "); i >= 0 {
		_, _ = fmt.Sscanf(res[i:], "stopped after %d", &sent)
	}
	if sent < 12 {
		t.Fatalf("stop answered %s", res)
	}
	for deadline := time.Now().Add(time.Minute); delivered() < sent; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, tick := range ticks {
		if want := fmt.Sprintf("tick %d", i+1); tick != want || len(ticks) != sent {
			t.Fatalf("delivered %q; want tick 1 to tick %d, each once, in order", ticks, sent)
		}
	}
	if c.resumes.Load() != 1 || c.onResumed.Load() == 0 || c.gets.Load() < 3 || c.fresh.Load() != 0 {
		t.Fatalf("GETs %d, resumptions %d, messages passed on them %d, fresh streams opened %d: want a fresh stream asked for beside 1 resumption that passed some, and none opened (the server refuses a second stream)", c.gets.Load(), c.resumes.Load(), c.onResumed.Load(), c.fresh.Load())
	}
}
