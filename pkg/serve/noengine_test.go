package serve_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// A server needs an engine: serve.New(nil, …) is refused with an error that says so. Before,
// it was taken, and the first tool call was a nil pointer dereference.
func TestNewWithoutAnEngineIsRefused(t *testing.T) {
	srv, err := serve.New(nil, serve.Options{})
	if err == nil {
		msg, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{"name": "fence_prepare", "arguments": prepareArgs("charge:order-1")}})
		var resp []byte
		func() {
			defer func() {
				if r := recover(); r != nil {
					resp = []byte("panic: " + strings.TrimSpace(strings.SplitN(strings.TrimSpace(toString(r)), "\n", 2)[0]))
				}
			}()
			resp, _ = json.Marshal(srv.MCP().HandleMessage(context.Background(), msg))
		}()
		t.Fatalf("serve.New took a nil engine; a fence_prepare is then answered %s", resp)
	}
	if !strings.Contains(err.Error(), "engine") {
		t.Fatalf("serve.New(nil): %v; want it to name the missing engine", err)
	}
}

func toString(v any) string {
	if e, ok := v.(error); ok {
		return e.Error()
	}
	s, _ := v.(string)
	return s
}

// Serve without an input or an output is refused with an error. Before, a nil reader was read
// on a goroutine of the server's, and the nil dereference ended the whole program.
func TestServeWithoutStreamsIsRefused(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	t.Cleanup(func() { eng.Close() })
	for name, streams := range map[string]struct {
		in  io.Reader
		out io.Writer
	}{"no input": {nil, io.Discard}, "no output": {strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"), nil}} {
		srv, err := serve.New(eng, serve.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Serve(context.Background(), streams.in, streams.out); err == nil || !strings.Contains(err.Error(), "input and an output") {
			t.Errorf("%s: Serve = %v; want an error naming the missing stream", name, err)
		}
	}
}
