package serve_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

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
