package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// sendLine writes a raw request line whose id is rawID and returns the channel its response
// arrives on (responses are matched by the exact bytes of their id).
func (c *stdioClient) sendLine(rawID, line string) <-chan json.RawMessage {
	c.t.Helper()
	ch := make(chan json.RawMessage, 1)
	c.mu.Lock()
	c.wait[rawID] = ch
	c.mu.Unlock()
	if _, err := c.in.Write([]byte(line + "\n")); err != nil {
		c.t.Fatal(err)
	}
	return ch
}

// A JSON-RPC id comes back exactly as the client sent it, whatever mcp-go makes of numbers:
// it read ids into float64, so 9007199254740993 was answered as 9007199254740992 and larger
// ones in exponent form, and the client could not match the answer to its request. Covers
// messages mcp-go answers itself (ping, tools/list) and tool calls the lanes answer.
func TestRequestIDsComeBackExactly(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	for _, tc := range []struct{ id, method, params string }{
		{"9007199254740993", "ping", `{}`},
		{"12345678901234567890123", "tools/list", `{}`},
		{"-9007199254740993", "tools/call", `{"name":"fence_stats","arguments":{}}`},
		{"1.5", "ping", `{}`},
		{"1e2", "ping", `{}`},
		{"42", "ping", `{}`},
		{`"a-string-id"`, "ping", `{}`},
		// Strings mcp-go decodes and writes again: a lone surrogate became U+FFFD (so two
		// ids became one), HTML characters, U+2028 and escapes were respelled.
		{`"x\udbff"`, "ping", `{}`},
		{`"x\udbfe"`, "tools/call", `{"name":"fence_stats","arguments":{}}`},
		{`"a<b>&"`, "tools/call", `{"name":"fence_stats","arguments":{}}`},
		{`"\u0041\/"`, "ping", `{}`},
		{`"l` + "\u2028" + `"`, "ping", `{}`},
		{`"é"`, "ping", `{}`},
		{"-0", "ping", `{}`},
		{"1.0", "tools/call", `{"name":"fence_stats","arguments":{}}`},
		{"1e400", "ping", `{}`},
	} {
		line := `{"jsonrpc":"2.0","id":` + tc.id + `,"method":"` + tc.method + `","params":` + tc.params + `}`
		select {
		case resp := <-c.sendLine(tc.id, line):
			if strings.Contains(string(resp), `"error"`) {
				t.Errorf("id %s (%s): %s", tc.id, tc.method, resp)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no response with id %s to %s (an answer with a changed id cannot be matched)", tc.id, tc.method)
		}
	}
}

// A tool handler that panics is answered with an internal error under the id the client
// sent, byte for byte (the recovery once read the id into an interface value).
func TestPanicReplyKeepsTheID(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdioWith(t, eng, serve.Options{}, func(s *serve.Server) {
		s.MCP().AddTool(mcp.NewTool("boom"), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			panic("boom")
		})
	})
	for _, id := range []string{"12345678901234567890123", "-9007199254740993", "1.5", "1e400", "-0", `"x\udbff"`, `"a<b>&"`, "7"} {
		line := `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"boom","arguments":{}}}`
		select {
		case resp := <-c.sendLine(id, line):
			if !strings.Contains(string(resp), `"error"`) || !strings.Contains(string(resp), "internal panic: boom") {
				t.Errorf("id %s: %s", id, resp)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no response with id %s to a panicking call (an answer with a changed id cannot be matched)", id)
		}
	}
}

// An id is held under a surrogate only while a response will carry it back: a message that
// gets none (a client's response, whatever its id; a message mcp-go answers with id null,
// such as a "method" that is not a string) must not hold one. Held ids are bounded, so
// before, a few thousand such messages used the bound up and every later unusual id was
// answered rounded or respelled again, for the rest of the process.
func TestIDsNotHeldForMessagesWithoutAResponse(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{})
	var b strings.Builder
	for i := 0; i < 2500; i++ {
		b.WriteString(`{"jsonrpc":"2.0","id":` + fmt.Sprint(i) + `.5,"result":{}}` + "\n")
		b.WriteString(`{"jsonrpc":"2.0","id":` + fmt.Sprint(i) + `.25,"method":5}` + "\n")
		// mcp-go reads members whatever their case (even "reſult") and answers with id null a
		// message it cannot read: these too get no answer under their id (review, 2026-12-05).
		n := fmt.Sprint(i)
		b.WriteString(`{"jsonrpc":2,"id":` + n + `.75,"method":"ping"}` + "\n")
		b.WriteString(`{"jsonrpc":"2.0","id":` + n + `.125,"method":"ping","Result":{}}` + "\n")
		b.WriteString(`{"jsonrpc":"2.0","id":` + n + `.375,"method":"ping","reſult":{}}` + "\n")
		b.WriteString(`{"jsonrpc":"2.0","id":` + n + `.625,"ID":-1,"method":"ping"}` + "\n")
	}
	if _, err := c.in.Write([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"9007199254740993", `"x\udbff"`} {
		select {
		case resp := <-c.sendLine(id, `{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`):
			if strings.Contains(string(resp), `"error"`) {
				t.Errorf("id %s: %s", id, resp)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("no response with id %s after 15,000 messages that get no response with their id: the ids they held used the bound up", id)
		}
	}
}
