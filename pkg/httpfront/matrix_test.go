package httpfront_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpback"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// The core's promises, for every front × back (docs/proxy-core.md "Test matrix"): the agent
// reaches `effectfence wrap` over stdio or Streamable HTTP (--listen), and wrap reaches the
// mcptest server as its stdio child or over Streamable HTTP (--upstream). Each scenario gets a
// fresh harness (a new server, gateway and ledger), since some end the server.

// caller is the agent's side of one harness.
type caller interface {
	Call(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
}

type harness struct {
	front, back string
	effects     string
	agent       caller
}

func newHarness(t *testing.T, front, back string) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{front: front, back: back, effects: filepath.Join(dir, "effects")}
	bin := binary(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"wrap", "--ledger", filepath.Join(dir, "ledger.db"), "--scope", "matrix", "--wait", "20s"}
	env := mcptest.Env(h.effects, "")
	if back == "http" {
		u, stop := startProcT(t, append(env, mcptest.EnvHTTP+"=127.0.0.1:0"), "mcptest: listening on ", exe, "-test.run=^$")
		t.Cleanup(stop)
		args = append(args, "--upstream", u)
	}
	tail := []string{}
	if back == "stdio" {
		tail = []string{"--", exe, "-test.run=^$"}
	}
	init := json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"matrix","version":"1"}}`)
	switch front {
	case "stdio":
		s, err := mcpstdio.Start(context.Background(), mcpstdio.Config{
			Command: append(append([]string{bin}, args...), tail...), Env: env, Stderr: os.Stderr, Init: init, InitTimeout: 60 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		h.agent = s
	case "http":
		argv := append(append(append([]string{bin}, args...), "--listen", "127.0.0.1:0"), tail...)
		u, stop := startProcT(t, env, "effectfence wrap: listening on ", argv...)
		t.Cleanup(stop)
		up := httpback.NewUpstream(httpback.Config{URL: u, Init: init})
		t.Cleanup(func() { up.Close() })
		s, err := up.Session(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		h.agent = s
	}
	return h
}

// startProcT is startProc for tests.
func startProcT(t *testing.T, env []string, prefix string, argv ...string) (string, func()) {
	t.Helper()
	u, stop, err := startProcE(env, prefix, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return u, stop
}

func (h *harness) call(t *testing.T, params string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := h.agent.Call(ctx, "tools/call", json.RawMessage(params))
	if err != nil {
		return "error: " + err.Error()
	}
	return string(res)
}

func (h *harness) executions(prefix string) int {
	n := 0
	for _, e := range mcptest.Effects(h.effects) {
		if strings.HasPrefix(e, prefix) {
			n++
		}
	}
	return n
}

// same strips what differs between a first answer and its replay (_meta and the note).
func same(res string) string {
	var r struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if json.Unmarshal([]byte(res), &r) != nil || len(r.Content) == 0 {
		return res
	}
	return fmt.Sprintf("%v %s", r.IsError, r.Content[0].Text)
}

func TestMatrix(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts real processes for four front×back harnesses")
	}
	scenarios := []struct {
		name string
		run  func(t *testing.T, h *harness)
	}{
		{"duplicates run once", func(t *testing.T, h *harness) {
			var wg sync.WaitGroup
			out := make([]string, 5)
			for i := range out {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Each a new id and progress token: still the same call.
					out[i] = h.call(t, fmt.Sprintf(`{"name":"slow","arguments":{"ms":400,"tag":"dup"},"_meta":{"progressToken":"p%d"}}`, i))
				}()
			}
			wg.Wait()
			if n := h.executions("slow tag=dup"); n != 1 {
				t.Fatalf("%d executions of 5 identical calls, want 1: %v", n, out)
			}
			for _, o := range out {
				if same(o) != same(out[0]) || strings.HasPrefix(o, "error") {
					t.Fatalf("answers differ: %v", out)
				}
			}
		}},
		{"a definite failure is shared, then a retry runs", func(t *testing.T, h *harness) {
			var wg sync.WaitGroup
			out := make([]string, 3)
			for i := range out {
				wg.Add(1)
				go func() { defer wg.Done(); out[i] = h.call(t, `{"name":"fail","arguments":{"ms":400,"tag":"f"}}`) }()
			}
			wg.Wait()
			if n := h.executions("fail tag=f"); n != 1 {
				t.Fatalf("%d attempts of 3 concurrent identical failing calls, want 1: %v", n, out)
			}
			for _, o := range out {
				if !strings.Contains(o, "card declined") {
					t.Fatalf("not all got the failure: %v", out)
				}
			}
			h.call(t, `{"name":"fail","arguments":{"ms":0,"tag":"f"}}`)
			if n := h.executions("fail tag=f"); n != 2 {
				t.Fatalf("a retry after a failure: %d attempts, want 2", n)
			}
		}},
		{"a server dying mid-call leaves it unknown", func(t *testing.T, h *harness) {
			first := h.call(t, `{"name":"die","arguments":{"ms":100,"tag":"d"}}`)
			if !strings.Contains(first, "unknown") {
				t.Fatalf("the call inside a dying server was answered %s", first)
			}
			again := h.call(t, `{"name":"die","arguments":{"ms":100,"tag":"d"}}`)
			if !strings.Contains(again, "prior_failure") {
				t.Fatalf("its retry was answered %s, want prior_failure", again)
			}
			if n := h.executions("die tag=d"); n != 1 {
				t.Fatalf("%d executions, want 1", n)
			}
		}},
		{"a task's outcome is its final result, not its handle", func(t *testing.T, h *harness) {
			// The server forgets a task while it runs: unknown, and the retry is refused.
			if got := h.call(t, `{"name":"slow","arguments":{"tag":"forgot","forget":true},"task":{"ttl":1000}}`); !strings.Contains(got, `"taskId":"forgotten-`) {
				t.Fatalf("want the server's task handle, got %s", got)
			}
			if again := h.call(t, `{"name":"slow","arguments":{"tag":"forgot","forget":true}}`); !strings.Contains(again, "prior_failure") || !strings.Contains(again, "NOT executed again") {
				t.Fatalf("the retry of a task the server forgot was answered %s, want prior_failure", again)
			}
			if n := h.executions("slow task tag=forgot"); n != 1 {
				t.Fatalf("%d executions, want 1", n)
			}
			// A task that failed (its tasks/result a JSON-RPC error) is released: a retry runs.
			if got := h.call(t, `{"name":"slow","arguments":{"tag":"failed","rpc":true},"task":{"ttl":1000}}`); !strings.Contains(got, `"taskId":"failed-`) {
				t.Fatalf("want the server's task handle, got %s", got)
			}
			deadline := time.Now().Add(30 * time.Second)
			for h.executions("slow task tag=failed") < 2 {
				if time.Now().After(deadline) {
					t.Fatal("no retry ran after a failed task")
				}
				h.call(t, `{"name":"slow","arguments":{"tag":"failed","rpc":true},"task":{"ttl":1000}}`)
			}
		}},
		{"a task handle answered to a call that asked for none is followed", func(t *testing.T, h *harness) {
			// Either shape: MCP 2025-11-25's nested one (before 2026-12-07 recorded as the
			// call's result and replayed), the tasks extension's flat one (SEP-2663). The
			// task's final result is recorded, and a duplicate receives it.
			for _, c := range []struct{ args, handle, final, effect string }{
				{`{"tag":"unasked","unasked":true}`, `"taskId":"unasked-`, "unasked task done", "slow unasked task tag=unasked"},
				{`{"tag":"flat","flat":true}`, `"taskId":"flat-`, "flat task done", "slow flat task tag=flat"},
			} {
				if got := h.call(t, `{"name":"slow","arguments":`+c.args+`}`); !strings.Contains(got, c.handle) {
					t.Fatalf("want the server's task handle, got %s", got)
				}
				deadline := time.Now().Add(30 * time.Second)
				for {
					dup := h.call(t, `{"name":"slow","arguments":`+c.args+`}`)
					if strings.Contains(dup, c.final) && strings.Contains(dup, `"effectfence/replayed":true`) {
						break
					}
					if !strings.Contains(dup, "in_flight") || time.Now().After(deadline) {
						t.Fatalf("a duplicate of the call answered %s was answered %s, want the task's final result replayed", c.handle, dup)
					}
				}
				if n := h.executions(c.effect); n != 1 {
					t.Fatalf("%s: %d executions, want 1", c.effect, n)
				}
			}
		}},
		{"a task whose server is lost after its handle is unknown", func(t *testing.T, h *harness) {
			// The server is gone once the task exists (a stdio server exits; an HTTP server
			// answers 404 to the task's tasks/result, as for a session it lost in a restart):
			// wrap's tasks/result is refused unsent, but the task was created and may have
			// taken effect. Before 2026-12-03 that refusal counted as "not sent", the intent
			// was released, and the retry ran the call again.
			if got := h.call(t, `{"name":"slow","arguments":{"tag":"lost","lose":true},"task":{"ttl":60000}}`); !strings.Contains(got, `"taskId":"lost-`) {
				t.Fatalf("want the server's task handle, got %s", got)
			}
			again := h.call(t, `{"name":"slow","arguments":{"tag":"lost","lose":true}}`)
			if n := h.executions("slow task tag=lost") + h.executions("slow tag=lost"); n != 1 {
				t.Fatalf("a task whose server was lost, then its retry (answered %s): %d executions, want 1", again, n)
			}
			if !strings.Contains(again, "prior_failure") || !strings.Contains(again, "NOT executed again") {
				t.Fatalf("the retry was answered %s, want prior_failure", again)
			}
		}},
		{"_meta passes through untouched", func(t *testing.T, h *harness) {
			const meta = `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","progressToken":"tp-1"}`
			got := h.call(t, `{"name":"meta","arguments":{"tag":"tp"},"_meta":`+meta+`}`)
			var r struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			}
			if json.Unmarshal([]byte(got), &r) != nil || len(r.Content) == 0 || r.Content[0].Text != "meta "+meta {
				t.Fatalf("the server saw %s, want _meta %s byte for byte", got, meta)
			}
		}},
		{"_meta is not part of the identity", func(t *testing.T, h *harness) {
			// docs/identity.md: progress tokens and trace context change per attempt; a retry
			// that carries new ones is the same call and receives the first one's result.
			first := h.call(t, `{"name":"meta","arguments":{"tag":"id"},"_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","progressToken":1}}`)
			retry := h.call(t, `{"name":"meta","arguments":{"tag":"id"},"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","progressToken":2}}`)
			if !strings.Contains(retry, `"effectfence/replayed":true`) || same(retry) != same(first) {
				t.Fatalf("a retry with other _meta was answered %s, want the replay of %s", retry, first)
			}
			if n := h.executions("meta tag=id"); n != 1 {
				t.Fatalf("%d executions, want 1", n)
			}
		}},
		{"input_required is not an outcome", func(t *testing.T, h *harness) {
			if got := h.call(t, `{"name":"confirm","arguments":{"tag":"m"}}`); !strings.Contains(got, "input_required") {
				t.Fatalf("round one: %s", got)
			}
			cont := `{"name":"confirm","arguments":{"tag":"m"},"inputResponses":{"ok":{"action":"accept"}},"requestState":"state-m"}`
			if got := h.call(t, cont); !strings.Contains(got, "confirmed n=1") {
				t.Fatalf("continuation: %s", got)
			}
			if got := h.call(t, `{"name":"confirm","arguments":{"tag":"m"}}`); !strings.Contains(got, "confirmed n=1") || !strings.Contains(got, "effectfence/replayed") {
				t.Fatalf("the original call after the continuation: %s", got)
			}
		}},
	}
	for _, front := range []string{"stdio", "http"} {
		for _, back := range []string{"stdio", "http"} {
			t.Run(front+"-front/"+back+"-back", func(t *testing.T) {
				for _, sc := range scenarios {
					t.Run(sc.name, func(t *testing.T) {
						sc.run(t, newHarness(t, front, back))
					})
				}
			})
		}
	}
}
