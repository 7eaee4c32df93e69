package serve_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// Found by a review of the surrogate-for-every-id change (2026-12-05); each failed on it.

// Two requests under one id: while both are in flight a cancellation naming the id reaches
// neither (ids.go: back). Once one is answered only the other is in flight, and the client's
// cancellation can name only it; it must reach it (it did not: the surrogate was forgotten
// when the second request came, for good).
func TestCancelReachesTheLastOfTwoRequestsUnderOneID(t *testing.T) {
	c, started, release := startCancellable(t, serve.Options{})
	t.Cleanup(func() { close(release) })
	// Both in flight at once, then the quick one answered.
	c.sendLine(`5`, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	recvStarted(t, started)
	quick := c.sendLine(`5`, `{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	// Both share the client's id: the test's client sees one answer under 5 (the ping's).
	if got := string(recv(t, quick, "the ping", 30*time.Second)); !strings.Contains(got, `"result":{}`) {
		t.Fatalf("ping: %s", got)
	}
	// Now only the tool call is in flight under 5; the test's client waits for one answer per
	// id, so the next answer under 5 is the call's.
	long := toBytes(c.sendLine(`5`, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`))
	select {
	case got := <-long:
		if !strings.Contains(string(got), "cancelled") {
			t.Errorf("the call under 5: %s", got)
		}
	case <-time.After(5 * time.Second):
		t.Error("the one request in flight under id 5 was not cancelled by a cancellation naming 5")
	}
}

func recvStarted(t *testing.T, ch <-chan string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not start")
	}
}

// mcp-go takes a message whose id is null for a notification, so a notifications/cancelled
// written with "id":null (JSON-RPC 1.0 style, as some clients write every notification)
// cancels the request it names. The router passed such a line on before it looked at its
// requestId, and every request is known to mcp-go by its surrogate only: it reached none.
func TestCancellationWithNullIDStillCancels(t *testing.T) {
	c, started, release := startCancellable(t, serve.Options{})
	t.Cleanup(func() { close(release) })
	answer := c.sendLine(`5`, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"block","arguments":{}}}`)
	recvStarted(t, started)
	if _, err := c.in.Write([]byte(`{"jsonrpc":"2.0","id":null,"method":"notifications/cancelled","params":{"requestId":5}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-answer:
		if !strings.Contains(string(got), "cancelled") {
			t.Errorf("the call: %s", got)
		}
	case <-time.After(5 * time.Second):
		t.Error("a notifications/cancelled with id null did not cancel the request it names")
	}
}

// A subscriptions/listen whose id is longer than 1 KiB, which ids does not keep among the
// subscriptions, is not given a surrogate: it was, and mcp-go's acknowledgement and the
// stream's final result carried the surrogate in _meta's subscriptionId.
func TestLongSubscriptionIDNeverShowsTheSurrogate(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	id := `"` + strings.Repeat("L", 1100) + `"`
	ack := c.sendLine(``, "")
	done := c.sendLine(id, `{"jsonrpc":"2.0","id":`+id+`,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},`+meta+`}}`)
	got := string(recv(t, ack, "the subscription's acknowledgement", 30*time.Second))
	if strings.Contains(got, "effectfence-id-") {
		t.Errorf("acknowledgement shows the surrogate: %.300s", got)
	}
	if _, err := c.in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}` + "\n")); err != nil {
		t.Fatal(err)
	}
	got = string(recv(t, done, "the end of the subscription", 30*time.Second))
	if strings.Contains(got, "effectfence-id-") {
		t.Errorf("end of the subscription shows the surrogate: %.300s", got)
	}
}

// rawSession serves srv over pipes and returns the client's input and every line served.
func rawSession(t *testing.T, srv *serve.Server) (io.WriteCloser, <-chan string) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), inR, outW); outW.Close() }()
	lines := make(chan string, 1<<16)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<22)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	t.Cleanup(func() { inW.Close(); <-done })
	return inW, lines
}

// Many subscriptions/listen at once: every acknowledgement must carry the client's id. The
// subscriptions' ids are kept for the acknowledgement, which mcp-go writes from a goroutine of
// its own, up to 4,096 (maxSubs), whether or not their acknowledgement was written.
func TestManyListensNeverShowTheSurrogate(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	srv, err := serve.New(eng, serve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, lines := rawSession(t, srv)
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	const n = 2000
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":"L%d","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},%s}}`+"\n", i, meta)
	}
	if _, err := in.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	acks, resps, leaked := 0, 0, 0
	deadline := time.After(60 * time.Second)
	for acks < n || resps < n {
		select {
		case l := <-lines:
			if strings.Contains(l, "subscriptions/acknowledged") {
				acks++
			} else {
				resps++
			}
			if strings.Contains(l, "effectfence-id-") {
				if leaked++; leaked <= 3 {
					t.Errorf("a surrogate reached the client: %.400s", l)
				}
			}
		case <-deadline:
			t.Fatalf("%d acknowledgements and %d responses of %d", acks, resps, n)
		}
	}
	if leaked > 0 {
		t.Errorf("%d of %d messages showed a surrogate", leaked, 2*n)
	}
}
