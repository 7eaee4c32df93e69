package serve_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// A notifications/cancelled cancels the one running request its requestId stands for, in any
// spelling, and no other. mcp-go cancels a running request by the id's printed value, so a
// cancellation of request "2" cancelled request 2 too (and 2.0 cancelled both): found in
// review, 2026-12-05. Every request now reaches mcp-go under a surrogate of its own.
func TestCancellationCancelsOnlyTheRequestItNames(t *testing.T) {
	c, started, release := startCancellable(t, serve.Options{Workers: 8})
	calls := []struct{ id, cancelAs string }{
		{`"2"`, `"\u0032"`}, // the same string, spelled otherwise
		{`2`, ``},           // never cancelled: it prints as the one above
		{`7`, `7.0e0`},      // the same number, spelled otherwise
		{`"7"`, ``},         // never cancelled: it prints as the one above
		{`9007199254740993`, ``},
		{`9007199254740992`, `9007199254740992.0`}, // a float64 cannot tell it from the one above
	}
	answers := map[string]<-chan []byte{}
	for i, call := range calls {
		// One at a time: mcp-go kept the last of two requests that print alike.
		answers[call.id] = toBytes(c.sendLine(call.id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"block","arguments":{"who":"%d"}}}`, call.id, i)))
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatalf("the blocking call %s did not start", call.id)
		}
	}
	for _, call := range calls {
		if call.cancelAs != "" {
			if _, err := c.in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + call.cancelAs + `}}` + "\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The router reads lines in order, and mcp-go handles a notification before the next line.
	select {
	case <-c.sendLine(`"sync"`, `{"jsonrpc":"2.0","id":"sync","method":"ping"}`):
	case <-time.After(30 * time.Second):
		t.Fatal("ping not answered")
	}
	// A cancelled call answers by itself; give each a moment before the rest are released.
	for _, call := range calls {
		if call.cancelAs == "" {
			continue
		}
		select {
		case resp := <-answers[call.id]:
			if !strings.Contains(string(resp), "cancelled") {
				t.Errorf("request %s, cancelled as %s: %s", call.id, call.cancelAs, resp)
			}
			delete(answers, call.id)
		case <-time.After(30 * time.Second):
			t.Errorf("request %s, cancelled as %s, was not cancelled", call.id, call.cancelAs)
		}
	}
	close(release)
	for id, ch := range answers {
		select {
		case resp := <-ch:
			if !strings.Contains(string(resp), "unblocked") {
				t.Errorf("request %s, never cancelled, answered %s: a cancellation of another request reached it", id, resp)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("request %s never answered", id)
		}
	}
}

// mcp-go tags a subscriptions/listen stream with the request's id (its acknowledgement and the
// result that ends it carry it as _meta's subscriptionId): the client's id, as it sent it, not
// the surrogate the router gave the request.
func TestSubscriptionIDIsTheClientsID(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`
	for _, id := range []string{`"listen-1"`, `9007199254740993`} {
		ack := c.sendLine(``, "") // a notification has no id
		done := c.sendLine(id, `{"jsonrpc":"2.0","id":`+id+`,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},`+meta+`}}`)
		got := string(recv(t, ack, "the subscription's acknowledgement", 30*time.Second))
		if !strings.Contains(got, `"io.modelcontextprotocol/subscriptionId":`+id) || strings.Contains(got, "effectfence-id-") {
			t.Errorf("acknowledgement of the subscription %s: %s", id, got)
		}
		if _, err := c.in.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}` + "\n")); err != nil {
			t.Fatal(err)
		}
		got = string(recv(t, done, "the end of the subscription", 30*time.Second))
		if strings.Contains(got, "effectfence-id-") || (strings.Contains(got, "subscriptionId") && !strings.Contains(got, `"io.modelcontextprotocol/subscriptionId":`+id)) {
			t.Errorf("end of the subscription %s: %s", id, got)
		}
	}
}

// startCancellable serves a tool "block" that runs until its request is cancelled (answering
// "cancelled") or release is closed ("unblocked"), each call sending its argument "who" on
// started as it begins.
func startCancellable(t *testing.T, opts serve.Options) (c *stdioClient, started chan string, release chan struct{}) {
	t.Helper()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	started, release = make(chan string, 8), make(chan struct{})
	c = startStdioWith(t, eng, opts, func(s *serve.Server) {
		s.MCP().AddTool(mcp.NewTool("block", mcp.WithString("who")), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			started <- req.GetString("who", "")
			select {
			case <-ctx.Done():
				return mcp.NewToolResultText("cancelled"), nil
			case <-release:
				return mcp.NewToolResultText("unblocked"), nil
			}
		})
	})
	return c, started, release
}
