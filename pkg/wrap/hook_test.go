package wrap_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// inproc is a Proxy served in this process, over pipes, in front of the real test server
// process: for options the effectfence command does not expose as flags (the policy file
// sets them).
type inproc struct {
	t      *testing.T
	in     *io.PipeWriter
	lines  chan []byte
	log    *logBuf
	served chan error
	closed sync.Once
	nextID int
	// onRequest answers the proxy's requests to the agent (elicitation/create).
	onRequest func(method string, params json.RawMessage) json.RawMessage
}

func (r *rig) inproc(opt wrap.Options, init string, onRequest func(string, json.RawMessage) json.RawMessage) (*inproc, *store.Ledger) {
	r.t.Helper()
	led := r.openLedger()
	log := &logBuf{}
	opt.Command, opt.Env, opt.Engine, opt.Log = r.childCmd(), r.env(), led.Engine, log
	p, err := wrap.New(opt)
	if err != nil {
		r.t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	x := &inproc{t: r.t, in: inW, lines: make(chan []byte, 64), log: log, served: make(chan error, 1), onRequest: onRequest}
	go func() { x.served <- p.Serve(context.Background(), inR, outW); outW.Close() }()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			line := append([]byte(nil), sc.Bytes()...)
			var m struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
				Params json.RawMessage `json:"params"`
			}
			if json.Unmarshal(line, &m) == nil && m.Method != "" && m.ID != nil {
				res := json.RawMessage(`{"action":"cancel"}`)
				if x.onRequest != nil {
					res = x.onRequest(m.Method, m.Params)
				}
				fmt.Fprintf(inW, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", m.ID, res)
				continue
			}
			x.lines <- line
		}
		close(x.lines)
	}()
	r.t.Cleanup(func() { x.close() })
	x.request("initialize", init)
	fmt.Fprintln(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return x, led
}

// request sends one request and returns its result (requests are made one at a time).
func (x *inproc) request(method, params string) json.RawMessage {
	x.t.Helper()
	x.nextID++
	fmt.Fprintf(x.in, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", x.nextID, method, params)
	for line := range x.lines {
		var m struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(line, &m) != nil || m.ID != x.nextID {
			continue // a notification
		}
		if m.Error != nil {
			x.t.Fatalf("%s: error %s", method, m.Error)
		}
		return m.Result
	}
	x.t.Fatalf("%s: the proxy stopped; log:\n%s", method, x.log.String())
	return nil
}

func (x *inproc) call(tool, args string) result {
	x.t.Helper()
	var res result
	raw := x.request("tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, tool, args))
	if err := json.Unmarshal(raw, &res); err != nil {
		x.t.Fatal(err)
	}
	return res
}

// close ends the agent's input and waits for Serve to return.
func (x *inproc) close() {
	x.closed.Do(func() {
		x.in.Close()
		<-x.served
	})
}

const initNoElicit = `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test-agent","version":"1"}}`

func unknownCall(t *testing.T, x *inproc) (intent string) {
	t.Helper()
	res := x.call("die", `{"tag":"s3cret-tag"}`)
	if !res.IsError || string(res.Meta["effectfence/code"]) != `"prior_failure"` {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	_ = json.Unmarshal(res.Meta["effectfence/intent"], &intent)
	return intent
}

// A real command receives the event on stdin, once per intent, with the arguments as the
// ledger keeps them.
func TestOnUnknownHookCommand(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events.jsonl")
	hook := &wrap.Hook{Command: []string{"sh", "-c", `cat >> "$0"; echo >> "$0"`, events}}
	x, _ := r.inproc(wrap.Options{OnUnknown: hook, Redact: map[string][]string{"die": {"tag"}}}, initNoElicit, nil)
	intent := unknownCall(t, x)
	if res := x.call("die", `{"tag":"s3cret-tag"}`); !res.IsError {
		t.Fatalf("the retry must be refused: %+v", res)
	}
	x.close() // delivers what is queued
	b, err := os.ReadFile(events)
	if err != nil {
		t.Fatalf("the hook never ran: %v\n%s", err, x.log.String())
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one event per intent, got %d:\n%s", len(lines), b)
	}
	var ev wrap.HookEvent
	if err := json.Unmarshal([]byte(lines[0]), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Event != "unknown" || ev.Intent != intent || ev.Tool != "die" || ev.State != fence.StateUnknown ||
		!strings.Contains(string(ev.Args), `"tag":"[redacted]"`) || strings.Contains(lines[0], "s3cret") ||
		!strings.Contains(ev.Reason, "died") || !strings.Contains(ev.ResolveCommand, "effectfence ledger resolve") || ev.At.IsZero() {
		t.Fatalf("event: %s", lines[0])
	}
}

// A real HTTP endpoint that fails twice then accepts gets the event on the third attempt; the
// log never shows the URL's secrets.
func TestOnUnknownHookHTTPRetries(t *testing.T) {
	t.Parallel()
	var (
		tries atomic.Int32
		mu    sync.Mutex
		got   []byte
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if tries.Add(1) <= 2 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(req.Body)
		mu.Lock()
		got = b
		mu.Unlock()
	}))
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "http://pager:pw-s3cret@", 1) + "/page?token=tok-s3cret"
	r := newRig(t)
	x, _ := r.inproc(wrap.Options{OnUnknown: &wrap.Hook{URL: u, Retries: 3}}, initNoElicit, nil)
	intent := unknownCall(t, x)
	waitFor(t, "the third delivery", func() bool { mu.Lock(); defer mu.Unlock(); return got != nil })
	x.close()
	var ev wrap.HookEvent
	if err := json.Unmarshal(got, &ev); err != nil || ev.Intent != intent {
		t.Fatalf("delivered %s (%v)", got, err)
	}
	if n := tries.Load(); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
	log := x.log.String()
	if strings.Contains(log, "pw-s3cret") || strings.Contains(log, "tok-s3cret") || !strings.Contains(log, "attempt 2 failed") || !strings.Contains(log, "503") {
		t.Fatalf("log must show the retries without the URL's secrets:\n%s", log)
	}
}

// A hook that never returns does not delay the agent's answers, and does not keep wrap from
// stopping.
func TestOnUnknownHookHungDoesNotBlock(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	started := filepath.Join(r.dir, "started")
	hook := &wrap.Hook{Command: []string{"sh", "-c", `echo > "$0"; exec sleep 600`, started}, Timeout: 3600e9}
	x, _ := r.inproc(wrap.Options{OnUnknown: hook}, initNoElicit, nil)
	unknownCall(t, x)
	waitFor(t, "the hook to start", func() bool { _, err := os.Stat(started); return err == nil })
	// The hook is hanging now; the agent is still answered.
	if res := x.call("charge", `{"amount":3}`); res.IsError {
		t.Fatalf("a call while the hook hangs: %+v", res)
	}
	if res := x.call("die", `{"tag":"s3cret-tag"}`); !res.IsError || string(res.Meta["effectfence/code"]) != `"prior_failure"` {
		t.Fatalf("the refusal while the hook hangs: %+v", res)
	}
	x.close()
}

func TestHookCheckAndRedactURL(t *testing.T) {
	for _, h := range []wrap.Hook{
		{},
		{Command: []string{"x"}, URL: "http://a"},
		{Command: []string{""}},
		{URL: "ftp://a/b"},
		{URL: "http://user:pw@/x"},
		{Command: []string{"x"}, Retries: wrap.NoHookRetries - 1},
		{Command: []string{"x"}, Retries: wrap.MaxHookRetries + 1},
		{Command: []string{"x"}, Timeout: -1},
	} {
		if err := h.Check(); err == nil {
			t.Errorf("Check(%+v) = nil, want an error", h)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("Check error shows a secret: %v", err)
		}
	}
	if err := (&wrap.Hook{URL: "https://hooks.example/x"}).Check(); err != nil {
		t.Fatal(err)
	}
	// Scheme and host only: user info, query and path (a Slack or Discord webhook's token)
	// are left out.
	for raw, want := range map[string]string{
		"https://u:p@h.example/x?k=v#f":                         "https://h.example/…",
		"https://hooks.slack.example/services/T0/B0/XXSECRETXX": "https://hooks.slack.example/…",
		"https://h.example:8443":                                "https://h.example:8443",
		"https://h.example/":                                    "https://h.example",
	} {
		if got := wrap.RedactURL(raw); got != want {
			t.Errorf("RedactURL(%s) = %s; want %s", raw, got, want)
		}
	}
	if _, err := wrap.New(wrap.Options{Command: []string{"x"}, Engine: fence.New(fence.NewMemoryStore(), fence.Config{}), Log: io.Discard, OnUnknown: &wrap.Hook{}}); err == nil {
		t.Fatal("New accepted a hook with neither command nor url")
	}
}

// A tool the policy keeps from elicitation, and a client that declares only URL-mode
// elicitation, get today's refusal and are never asked.
func TestNoElicitKeepsTheRefusal(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		init     string
		noElicit map[string]bool
	}{
		"forbidden for the tool": {`{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"a","version":"1"}}`, map[string]bool{"die": true}},
		"url mode only":          {`{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{"url":{}}},"clientInfo":{"name":"a","version":"1"}}`, nil},
	} {
		t.Run(name, func(t *testing.T) {
			var asked atomic.Int32
			r := newRig(t)
			x, led := r.inproc(wrap.Options{NoElicit: tc.noElicit}, tc.init, func(string, json.RawMessage) json.RawMessage {
				asked.Add(1)
				return json.RawMessage(`{"action":"accept","content":{"outcome":"did_not_happen"}}`)
			})
			intent := unknownCall(t, x)
			res := x.call("die", `{"tag":"s3cret-tag"}`)
			if !res.IsError || string(res.Meta["effectfence/code"]) != `"prior_failure"` || asked.Load() != 0 {
				t.Fatalf("want the refusal and no question (asked %d): %+v", asked.Load(), res)
			}
			if st, _ := led.Status(context.Background(), intent); st.State != fence.StateUnknown {
				t.Fatalf("state %s, want unknown", st.State)
			}
		})
	}
	// The same client with elicitation allowed is asked, and its answer runs the call.
	var asked atomic.Int32
	r := newRig(t)
	x, led := r.inproc(wrap.Options{}, `{"protocolVersion":"2025-06-18","capabilities":{"elicitation":{}},"clientInfo":{"name":"a","version":"1"}}`, func(method string, _ json.RawMessage) json.RawMessage {
		if method == "elicitation/create" {
			asked.Add(1)
		}
		return json.RawMessage(`{"action":"accept","content":{"outcome":"happened","reference":"ref-9"}}`)
	})
	intent := unknownCall(t, x)
	res := x.call("die", `{"tag":"s3cret-tag"}`)
	if res.IsError || !res.replayed() || !strings.Contains(res.text(), "ref-9") || asked.Load() != 1 {
		t.Fatalf("want a replay of the confirmed result after one question (asked %d): %+v", asked.Load(), res)
	}
	if st, _ := led.Status(context.Background(), intent); st.State != fence.StateDone {
		t.Fatalf("state %s, want done", st.State)
	}
}
