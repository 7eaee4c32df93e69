package serve_test

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// cutPipe is the client's end of serve's stdout: lines reach the test until it is cut (the
// client closed the pipe); then each write fails with EPIPE, having written none of its bytes,
// or, with partial, half of them.
type cutPipe struct {
	mu      sync.Mutex
	cut     bool
	partial bool
	lines   chan []byte
}

func (p *cutPipe) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		if p.partial {
			return len(b) / 2, syscall.EPIPE
		}
		return 0, syscall.EPIPE
	}
	p.lines <- append([]byte(nil), b...)
	return len(b), nil
}

func (p *cutPipe) close(partial bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.partial = true, partial
}

// A fence_prepare admitted for a client that closed the pipe serve answers on: its ticket
// could not be written, so nobody holds the claim, and it would stay in flight, then unknown,
// fenced for an operator though nothing ran. The claim is released, with an event saying why
// (before: held, then unknown). An answer part of which was written is not released: the
// client may have read the ticket. A commit's answer that cannot be written changes nothing of
// what the commit recorded.
func TestUndeliveredTicketIsReleased(t *testing.T) {
	for _, partial := range []bool{false, true} {
		name := "nothing written"
		if partial {
			name = "part written"
		}
		t.Run(name, func(t *testing.T) {
			st := fence.NewMemoryStore()
			eng := fence.New(st, fence.Config{})
			t.Cleanup(func() { eng.Close() })
			srv, err := serve.New(eng, serve.Options{})
			if err != nil {
				t.Fatal(err)
			}
			inR, inW := io.Pipe()
			out := &cutPipe{lines: make(chan []byte, 16)}
			served := make(chan error, 1)
			go func() { served <- srv.Serve(context.Background(), inR, out) }()
			send := func(id int, tool string, args string) {
				t.Helper()
				line := `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}` + "\n"
				if _, err := inW.Write([]byte(line)); err != nil {
					t.Fatal(err)
				}
			}
			send(1, serve.ToolPrepare, `{"intent":"charge:held","tool":"charge_card","args":{"amount":1}}`)
			var first struct {
				Result struct {
					StructuredContent serve.PrepareResult `json:"structuredContent"`
				} `json:"result"`
			}
			select {
			case b := <-out.lines:
				if err := json.Unmarshal(b, &first); err != nil || first.Result.StructuredContent.Ticket == nil {
					t.Fatalf("the first prepare: %s", b)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the first prepare was not answered")
			}

			out.close(partial)
			ticket, err := json.Marshal(first.Result.StructuredContent.Ticket)
			if err != nil {
				t.Fatal(err)
			}
			send(2, serve.ToolCommit, `{"ticket":`+string(ticket)+`,"result":{"charge":"ch_1"}}`)
			send(3, serve.ToolPrepare, `{"intent":"charge:lost","tool":"charge_card","args":{"amount":2}}`)
			inW.Close()
			select {
			case err := <-served:
				if err != nil {
					t.Fatalf("Serve after its client hung up: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Serve did not end after its client hung up")
			}

			ctx := context.Background()
			if rec, err := eng.Status(ctx, "charge:held"); err != nil || rec.State != fence.StateDone {
				t.Fatalf("the commit whose answer was not written: %v %s; want done", err, rec.State)
			}
			rec, err := eng.Status(ctx, "charge:lost")
			if err != nil {
				t.Fatal(err)
			}
			if partial {
				if rec.State != fence.StateInFlight {
					t.Fatalf("a claim whose ticket was partly written is %s; want it kept in flight (the client may hold the ticket)", rec.State)
				}
				return
			}
			if rec.State != fence.StateNone {
				t.Fatalf("a claim whose ticket reached nobody is %s; want it released", rec.State)
			}
			var why []string
			if err := st.View(ctx, func(tx fence.Tx) error {
				return tx.Events("charge:lost", func(ev fence.Event) bool {
					if ev.Kind == fence.EventRelease {
						why = append(why, ev.Reason)
					}
					return true
				})
			}); err != nil {
				t.Fatal(err)
			}
			if len(why) != 1 || !strings.Contains(why[0], "nobody received the ticket") {
				t.Fatalf("release events %q; want one saying the ticket reached nobody", why)
			}
		})
	}
}
