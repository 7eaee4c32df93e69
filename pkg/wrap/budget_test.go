package wrap_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// agentPipes is an agent speaking to a Proxy served in this process over pipes: it writes
// lines in the order given and reads every line the proxy writes at once, so neither side's
// writes wait for the other's reads.
type agentPipes struct {
	t     *testing.T
	in    *io.PipeWriter
	out   chan map[string]json.RawMessage // the proxy's messages, decoded one level
	asked chan json.RawMessage            // ids of the proxy's requests to the agent
	log   *logBuf
	done  chan error
}

func (r *rig) agentPipes() (*agentPipes, *wrap.Proxy) {
	r.t.Helper()
	led := r.openLedger()
	a := &agentPipes{t: r.t, out: make(chan map[string]json.RawMessage, 64), asked: make(chan json.RawMessage, 4), log: &logBuf{}, done: make(chan error, 1)}
	p, err := wrap.New(wrap.Options{Command: r.childCmd(), Env: r.env(), Engine: led.Engine, Log: a.log})
	if err != nil {
		r.t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	a.in = inW
	go func() { a.done <- p.Serve(context.Background(), inR, outW); outW.Close() }()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				continue
			}
			if m["method"] != nil && m["id"] != nil {
				a.asked <- m["id"]
				continue
			}
			a.out <- m
		}
		close(a.out)
	}()
	r.t.Cleanup(func() {
		inW.Close()
		select {
		case <-a.done:
		case <-time.After(30 * time.Second):
			r.t.Errorf("the proxy did not stop; log:\n%s", a.log.String())
		}
	})
	a.send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"t","version":"1"}}}`)
	a.answer("0", 30*time.Second)
	a.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return a, p
}

func (a *agentPipes) send(line string) {
	if _, err := io.WriteString(a.in, line+"\n"); err != nil {
		a.t.Errorf("writing to the proxy: %v", err)
	}
}

// call is a tools/call line of tool with args under id.
func toolCall(id int, tool, args string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, tool, args)
}

// answer waits up to within for the response with id (other messages are dropped) and
// returns it whole, as a string.
func (a *agentPipes) answer(id string, within time.Duration) string {
	a.t.Helper()
	timer := time.NewTimer(within)
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
			a.t.Fatalf("no answer to %s within %s; log:\n%s", id, within, a.log.String())
		}
	}
}

// TestAgentAnswerBehindALargeLineIsRead: the request budget is full (large calls in flight)
// when the server asks the agent for its roots during a call, and the agent writes a large
// call before its answer. The reader waits for room (back-pressure), but not for ever: the
// large call is skipped unread after the wait and answered that it was NOT executed (it never
// reached the fence), the answer behind it is read and the server's call completes. Sent
// again with room, the large call runs, once. Waiting for ever instead, the server gives up
// on its question (mcptest's ask waits 10 s) while the answer sits behind the waiting line.
// (Not parallel: it replaces the process's request budget.)
func TestAgentAnswerBehindALargeLineIsRead(t *testing.T) {
	const wait = 500 * time.Millisecond
	pool, restore := wrap.SetRequestBudget(4<<20, wait)
	defer restore()
	r := newRig(t)
	a, p := r.agentPipes()
	large := toolCall(3, "charge", `{"amount":3,"note":"`+strings.Repeat("n", 2<<20)+`"}`)

	pool.Acquire(context.Background(), pool.Total(), 0) // as large calls being served would
	held := true
	defer func() {
		if held {
			pool.Release(pool.Total())
		}
	}()
	a.send(toolCall(2, "ask", `{}`))
	var asked json.RawMessage
	select {
	case asked = <-a.asked:
	case <-time.After(30 * time.Second):
		t.Fatalf("the server's question never reached the agent; log:\n%s", a.log.String())
	}
	start := time.Now()
	go func() {
		a.send(large)
		a.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"roots":[{"uri":"file:///budget"}]}}`, asked))
	}()
	refused := a.answer("3", 20*time.Second)
	if !strings.Contains(refused, "-32603") || !strings.Contains(refused, "NOT executed") || time.Since(start) < wait {
		t.Fatalf("a large call while the budget was full: %s after %s; want it refused unread after %s", refused, time.Since(start), wait)
	}
	if got := a.answer("2", 20*time.Second); !strings.Contains(got, "client said") || !strings.Contains(got, "file:///budget") {
		t.Fatalf("the call whose question was answered behind the large line: %s", got)
	}
	if n := r.effectsOf("charge"); n != 0 {
		t.Fatalf("%d executions of the call refused unread, want 0", n)
	}
	pool.Release(pool.Total())
	held = false
	a.send(strings.Replace(large, `"id":3`, `"id":4`, 1))
	if got := a.answer("4", 60*time.Second); !strings.Contains(got, "charged 3") {
		t.Fatalf("the large call sent again with room: %.300s", got)
	}
	if n := r.effectsOf("charge"); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
	waitFor(t, "the request budget given back", func() bool { now, _ := pool.Used(); return now == 0 })
	if sizes := p.StateSizes(); sizes["pending"] != 0 {
		t.Fatalf("per-call state left: %v", sizes)
	}
}

// TestLargeCallAndItsLargeAnswerDoNotWaitForEachOther: a large call holds the request budget
// until it is answered, here the whole of it, and its answer from the server is as large: the
// answer is read from the server's budget, not the requests', so it is not left waiting for
// room that only its own call's end would give back. (Not parallel: it replaces the process's
// request budget.)
func TestLargeCallAndItsLargeAnswerDoNotWaitForEachOther(t *testing.T) {
	pool, restore := wrap.SetRequestBudget(2<<20, time.Minute)
	defer restore()
	r := newRig(t)
	a, _ := r.agentPipes()
	text := strings.Repeat("e", 3<<19)
	start := time.Now()
	a.send(toolCall(5, "echo", `{"text":"`+text+`"}`))
	got := a.answer("5", 30*time.Second)
	if !strings.Contains(got, "echo "+text) || strings.Contains(got, `"isError":true`) {
		t.Fatalf("a large call with a large answer: %.300s after %s", got, time.Since(start))
	}
	waitFor(t, "the request budget given back", func() bool { now, _ := pool.Used(); return now == 0 })
	if _, most := pool.Used(); most < int64(len(text)) {
		t.Fatalf("the request budget held at most %d bytes; want the call's %d while it ran", most, len(text))
	}
}

// TestAgentAnswerSkippedReachesTheServer: an answer of the agent's to the server's request
// that finds no room in the request budget within the wait is skipped unread, and the server's
// request gets an error saying so at once, instead of waiting for an answer that was dropped.
// (Not parallel: it replaces the process's request budget.)
func TestAgentAnswerSkippedReachesTheServer(t *testing.T) {
	pool, restore := wrap.SetRequestBudget(4<<20, 300*time.Millisecond)
	defer restore()
	r := newRig(t)
	a, p := r.agentPipes()
	pool.Acquire(context.Background(), pool.Total(), 0)
	defer pool.Release(pool.Total())
	a.send(toolCall(2, "ask", `{}`))
	var asked json.RawMessage
	select {
	case asked = <-a.asked:
	case <-time.After(30 * time.Second):
		t.Fatalf("the server's question never reached the agent; log:\n%s", a.log.String())
	}
	go a.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"roots":[{"uri":"file:///%s"}]}}`, asked, strings.Repeat("r", 2<<20)))
	got := a.answer("2", 8*time.Second) // the server's ask gives up after 10 s
	if !strings.Contains(got, "client error") || !strings.Contains(got, "skipped unread") {
		t.Fatalf("the call whose question's answer was skipped: %.300s", got)
	}
	if sizes := p.StateSizes(); sizes["pending"] != 0 {
		t.Fatalf("per-call state left: %v", sizes)
	}
}
