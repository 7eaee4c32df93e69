package serve_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

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
