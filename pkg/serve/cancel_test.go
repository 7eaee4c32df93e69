package serve_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// A client's notifications/cancelled ends a fence_prepare waiting on an intent in flight,
// whatever its id: ids mcp-go would respell travel under a surrogate of ours, and the
// cancellation must name the surrogate too (it named the client's id, which mcp-go never saw,
// so the wait ran to its end).
func TestCancelReachesEveryID(t *testing.T) {
	for _, id := range []string{"77", "9007199254740993", `"x\udbff"`, `"a<b>"`} {
		t.Run(id, func(t *testing.T) {
			c, answer := waitBehindHolder(t, id, 60)
			cancel := []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `,"reason":"the user gave up"}}` + "\n")
			// A cancellation that arrives before the request is registered is dropped, so
			// repeat it until the answer comes; each is harmless once the request is gone.
			deadline := time.After(20 * time.Second)
			for {
				if _, err := c.in.Write(cancel); err != nil {
					t.Fatal(err)
				}
				select {
				case raw := <-answer:
					// What a cancelled request is answered does not matter here (the
					// client ignores it; TestCancelledWaitIsAnsweredAsTheCancellation
					// holds its code), only that the wait ended.
					if !strings.Contains(string(raw), `"isError":true`) {
						t.Fatalf("the cancelled wait answered %s", raw)
					}
					return
				case <-time.After(200 * time.Millisecond):
				case <-deadline:
					t.Fatalf("a prepare waiting up to 60 s with id %s was cancelled, but still no answer after 20 s", id)
				}
			}
		})
	}
}

// A line that mentions notifications/cancelled but is no such notification does not bring the
// server down while an id is held under a surrogate: the check for a cancellation to rewrite
// read a "method" that is a one-digit number as a string literal (and sliced past its end),
// and walked a JSON array as if it were an object (and indexed past its end). The lines are
// mcp-go's to refuse, and the server goes on answering.
func TestCancelCheckSurvivesANonStringMethod(t *testing.T) {
	// A prepare that waits, under an id mcp-go would respell: it is held under a surrogate.
	c, waiting := waitBehindHolder(t, `"a<b>"`, 3)
	time.Sleep(200 * time.Millisecond) // let the wait begin
	for _, line := range []string{
		`{"jsonrpc":"2.0","method":5,"params":{"requestId":"a<b>"},"note":"notifications/cancelled"}`,
		`["notifications/cancelled"]`, // not an object at all: it was walked as one, past its end
	} {
		if _, err := c.in.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	recv(t, waiting, "the waiting prepare", 30*time.Second)
	recv(t, c.send(2, "tools/call", map[string]any{"name": serve.ToolStatus, "arguments": map[string]any{"intent": "charge:order-9"}}), "status after the odd line", 10*time.Second)
}

// waitBehindHolder starts a server, admits an intent (the holder, never ended) and sends a
// fence_prepare of the same intent with wait_secs under the raw JSON-RPC id rawID; it returns
// the client and the channel the waiting prepare's answer arrives on.
func waitBehindHolder(t *testing.T, rawID string, waitSecs int) (*stdioClient, <-chan json.RawMessage) {
	t.Helper()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	args := map[string]any{"intent": "charge:order-9", "tool": "charge_card", "args": map[string]any{"amount": 4900}}
	var first serve.PrepareResult
	if toolResult(t, recv(t, c.send(1, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": args}), "first prepare", 30*time.Second), &first) || first.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", first)
	}
	args["wait_secs"] = waitSecs
	wargs, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return c, c.sendLine(rawID, `{"jsonrpc":"2.0","id":`+rawID+`,"method":"tools/call","params":{"name":"fence_prepare","arguments":`+string(wargs)+`}}`)
}

// A request the client cancelled (a wait_secs wait that ends with it) is not a ledger failure:
// its refusal must not tell the agent the ledger failed, and must not let it run the effect.
func TestCancelledRequestIsNotALedgerFailure(t *testing.T) {
	for _, err := range []error{context.Canceled, fmt.Errorf("waiting for pay:1: %w", context.Canceled)} {
		r := serve.RefusalOf("pay:1", err)
		if strings.Contains(r.Next, "ledger failed") || !strings.Contains(r.Next, "cancelled") || !strings.Contains(r.Next, "Do not run the effect") {
			t.Fatalf("%v: next %q", err, r.Next)
		}
		if r.Intent != "pay:1" {
			t.Fatalf("%v: intent %q", err, r.Intent)
		}
	}
	if r := serve.RefusalOf("pay:1", errors.New("disk I/O error")); !strings.Contains(r.Next, "ledger failed") {
		t.Fatalf("a store error: next %q", r.Next)
	}
}
