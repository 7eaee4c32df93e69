package mcpstdio_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// TestAnswerWithNoRoomIsFencedUnknown: docs/wrap.md's promise for the server's side of the
// answer budget, through a real wrap (served in this process, so the budget it reads with is
// the one this test lowers) over a real child. While the budget is full, the child's large
// answer to a fenced call waits for room, not for ever: it is skipped unread, like a line over
// 64 MiB. The call ran, so it is fenced as unknown, never "not run": the agent is told it will
// NOT be executed again, and the same call sent again once there is room is refused, not run.
// (Not parallel: it replaces the process's answer budget.)
func TestAnswerWithNoRoomIsFencedUnknown(t *testing.T) {
	pool, restore := mcpstdio.SetAnswerBudget(4<<20, 300*time.Millisecond)
	defer restore()
	cfg, effects, _ := config(t, "")
	a := serveWrap(t, wrap.Options{Command: cfg.Command, Env: cfg.Env, Engine: fence.New(fence.NewMemoryStore(), fence.Config{})})
	huge := func(id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"huge","arguments":{"size":%d}}}`, id, 3<<19)
	}

	pool.Acquire(context.Background(), pool.Total(), 0) // as large answers being served would
	held := true
	defer func() {
		if held {
			pool.Release(pool.Total())
		}
	}()
	a.send(huge(2))
	if got := a.answer("2"); !strings.Contains(got, `"effectfence/code":"prior_failure"`) || !strings.Contains(got, "NOT be executed again") {
		t.Fatalf("a fenced call whose answer found no room: %.400s; want it fenced as unknown", got)
	}
	if n := hugeRuns(effects); n != 1 {
		t.Fatalf("%d executions of the call whose answer found no room, want 1", n)
	}
	pool.Release(pool.Total())
	held = false
	a.send(huge(3))
	if got := a.answer("3"); !strings.Contains(got, `"effectfence/code":"prior_failure"`) {
		t.Fatalf("the call sent again with room: %.400s; want it refused, still fenced", got)
	}
	if n := hugeRuns(effects); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

func hugeRuns(effects string) int {
	n := 0
	for _, l := range mcptest.Effects(effects) {
		if strings.HasPrefix(l, "huge ") {
			n++
		}
	}
	return n
}

// wrapAgent is an agent speaking to a wrap.Proxy served in this process over pipes.
type wrapAgent struct {
	t   *testing.T
	in  *io.PipeWriter
	out chan map[string]json.RawMessage // the proxy's messages, decoded one level
	log *syncBuf
}

// serveWrap serves a proxy made from opt (its Log is set here) and initializes it.
func serveWrap(t *testing.T, opt wrap.Options) *wrapAgent {
	t.Helper()
	a := &wrapAgent{t: t, out: make(chan map[string]json.RawMessage, 64), log: &syncBuf{}}
	opt.Log = a.log
	p, err := wrap.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a.in = inW
	done := make(chan struct{})
	go func() { _ = p.Serve(context.Background(), inR, outW); outW.Close(); close(done) }()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				a.out <- m
			}
		}
		close(a.out)
	}()
	t.Cleanup(func() {
		inW.Close()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("the proxy did not stop; log:\n%s", a.log.String())
		}
	})
	a.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	a.answer("0")
	a.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return a
}

func (a *wrapAgent) send(line string) {
	if _, err := io.WriteString(a.in, line+"\n"); err != nil {
		a.t.Errorf("writing to the proxy: %v", err)
	}
}

// answer waits up to 30 s for the response with id (other messages are dropped) and returns
// it whole.
func (a *wrapAgent) answer(id string) string {
	a.t.Helper()
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-a.out:
			if !ok {
				a.t.Fatalf("the proxy stopped before answering %s; log:\n%s", id, a.log.String())
			}
			if string(m["id"]) == id {
				b, _ := json.Marshal(m)
				return string(b)
			}
		case <-timer.C:
			a.t.Fatalf("no answer to %s within 30 s; log:\n%s", id, a.log.String())
		}
	}
}
