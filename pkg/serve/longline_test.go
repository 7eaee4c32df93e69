package serve_test

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestLongLineRefusedNotHeld: a client line longer than the bound is refused with a JSON-RPC
// error under its id (read as the line went by) and skipped, the next request is served, and reading
// the long line costs about the bound in memory, not the line's length. Before, serve read
// every line whole: a client that never sent a newline grew the server without limit.
func TestLongLineRefusedNotHeld(t *testing.T) {
	const bound = 256 << 10 // above the harness's MaxArgBytes (64 KiB) and 64 KiB of envelope
	defer serve.SetMaxMessage(bound)()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	c := startStdio(t, eng, serve.Options{MaxArgBytes: 64 << 10})

	refused := c.waitFor("7")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// 32 MiB of one tools/call, written from one reused chunk.
	const lineBytes = 32 << 20
	head := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"long","tool":"t","args":{"blob":"`
	if _, err := c.in.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for n := 0; n < lineBytes; n += len(chunk) {
		if _, err := c.in.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.in.Write([]byte("\"}}}}\n")); err != nil {
		t.Fatal(err)
	}
	raw := recv(t, refused, "the long line", 60*time.Second)
	runtime.ReadMemStats(&after)
	var r struct {
		ID    json.RawMessage `json:"id"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &r); err != nil || r.Error == nil || r.Error.Code != -32600 || !strings.Contains(r.Error.Message, "longer than 262144 bytes") {
		t.Fatalf("want an invalid-request error naming the bound, got %s", raw)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Fatalf("reading a %d-byte line allocated %d bytes; the bound is %d", lineBytes, got, bound)
	}

	// The line was skipped whole: the next request is answered, and nothing was recorded.
	var p serve.PrepareResult
	if toolResult(t, recv(t, c.send(8, "tools/call", map[string]any{"name": serve.ToolPrepare, "arguments": map[string]any{"intent": "long", "tool": "t"}}), "the next request", 30*time.Second), &p) || p.Status != serve.StatusFresh {
		t.Fatalf("after the long line: %+v", p)
	}
}

// waitFor returns the channel on which the response with id (as JSON) arrives.
func (c *stdioClient) waitFor(id string) <-chan json.RawMessage {
	ch := make(chan json.RawMessage, 1)
	c.mu.Lock()
	c.wait[id] = ch
	c.mu.Unlock()
	return ch
}
