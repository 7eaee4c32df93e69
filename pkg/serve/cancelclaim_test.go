package serve_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// holdStore is a memory store whose next write transaction, once armed, waits inside Update
// until the test lets it go: the ledger is admitting a claim while the test acts.
type holdStore struct {
	fence.Store
	mu      sync.Mutex
	armed   bool
	entered chan struct{}
	release chan struct{}
	ctx     context.Context // the held transaction's
}

func (h *holdStore) arm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.entered, h.release = true, make(chan struct{}), make(chan struct{})
}

func (h *holdStore) Update(ctx context.Context, fn func(fence.Tx) error) error {
	h.mu.Lock()
	armed, entered, release := h.armed, h.entered, h.release
	h.armed = false
	h.mu.Unlock()
	if armed {
		h.ctx = ctx
		close(entered)
		<-release
	}
	return h.Store.Update(ctx, fn)
}

// A fence_prepare whose agent cancels the request (notifications/cancelled) while the ledger
// admits its claim: the client drops the answer to a request it cancelled, so a ticket
// answered would reach nobody, and the intent would stay in flight, then unknown, fenced until
// an operator clears it. The claim is released (an event says why), the answer carries no
// ticket, and the retry is admitted. Before: the ticket was answered and the intent held.
//
// The client's input ending cancels every request too, but a client that sent its requests and
// closed its input still reads the answers: a claim admitted then is answered with its ticket.
func TestPrepareCancelledWhileAdmittedReleasesTheClaim(t *testing.T) {
	for _, tc := range []struct {
		name     string
		waitSecs int
		eof      bool // the input ends instead of a cancellation
	}{
		{"cancelled", 0, false},
		{"cancelled while it may wait", 5, false},
		{"input ended", 0, true},
		{"input ended while it may wait", 5, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &holdStore{Store: fence.NewMemoryStore()}
			eng := fence.New(st, fence.Config{})
			t.Cleanup(func() { eng.Close() })
			c := startStdio(t, eng, serve.Options{})
			recv(t, c.send(9, "ping", map[string]any{}), "the first ping", 30*time.Second)

			args := map[string]any{"intent": "charge:order-1", "tool": "charge_card", "args": map[string]any{"amount": 5}}
			if tc.waitSecs > 0 {
				args["wait_secs"] = tc.waitSecs
			}
			st.arm()
			answer := c.send(1, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": args})
			select {
			case <-st.entered:
			case <-time.After(30 * time.Second):
				t.Fatal("the prepare never reached the ledger")
			}
			session := serve.SessionOf(st.ctx)
			if session == nil {
				t.Fatal("the ledger's context carries no session")
			}
			if tc.eof {
				c.in.Close()
				// Serve cancels the session, and with it every request, once the input ended.
				select {
				case <-session.Done():
				case <-time.After(30 * time.Second):
					t.Fatal("the session was not cancelled after the input ended")
				}
			} else {
				if _, err := c.in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"the user gave up"}}` + "\n")); err != nil {
					t.Fatal(err)
				}
				// mcp-go handles a notification before it reads the next line: once the ping
				// is answered, the prepare's context is cancelled.
				recv(t, c.send(2, "ping", map[string]any{}), "the ping after the cancellation", 30*time.Second)
			}
			close(st.release)
			raw := recv(t, answer, "the prepare", 30*time.Second)

			var got serve.PrepareResult
			isError := toolResult(t, raw, &got)
			rec, err := eng.Status(context.Background(), "charge:order-1")
			if err != nil {
				t.Fatal(err)
			}
			if tc.eof {
				if isError || got.Status != serve.StatusFresh || got.Ticket == nil {
					t.Fatalf("a client whose input ended got %s; want its ticket", raw)
				}
				if rec.State != fence.StateInFlight {
					t.Fatalf("the claim answered is %s", rec.State)
				}
				return
			}
			if !isError || got.Ticket != nil {
				t.Fatalf("the cancelled prepare was answered %s; want a refusal without the ticket", raw)
			}
			if !strings.Contains(string(raw), "cancelled") {
				t.Fatalf("the refusal does not say the request was cancelled: %s", raw)
			}
			if rec.State != fence.StateNone {
				t.Fatalf("the intent is %s; want the claim released", rec.State)
			}
			var why []string
			if err := st.View(context.Background(), func(tx fence.Tx) error {
				return tx.Events("charge:order-1", func(ev fence.Event) bool {
					if ev.Kind == fence.EventRelease {
						why = append(why, ev.Reason)
					}
					return true
				})
			}); err != nil {
				t.Fatal(err)
			}
			if len(why) != 1 || !strings.Contains(why[0], "cancelled") {
				t.Fatalf("release events %q; want one saying the agent cancelled", why)
			}
			var again serve.PrepareResult
			if toolResult(t, recv(t, c.send(3, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": args}), "the retry", 30*time.Second), &again) || again.Status != serve.StatusFresh {
				t.Fatalf("the retry: %+v; want admitted", again)
			}
		})
	}
}
