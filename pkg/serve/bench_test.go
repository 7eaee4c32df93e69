package serve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// BenchmarkReplay measures a duplicate prepare of a done intent: straight into the engine, and
// as an MCP tools/call message through the server (schema check, decode, encode), both on the
// memory store, so the difference is what the MCP layer costs.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer eng.Close()
	req := fence.Request{Intent: "charge:order-1", Tool: "charge_card", Args: json.RawMessage(`{"amount":4900}`)}
	adm, err := eng.Prepare(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`)); err != nil {
		b.Fatal(err)
	}
	b.Run("engine", func(b *testing.B) {
		for b.Loop() {
			if a, err := eng.Prepare(ctx, req); err != nil || a.Fresh() {
				b.Fatal(err)
			}
		}
	})
	srv, err := serve.New(eng, serve.Options{})
	if err != nil {
		b.Fatal(err)
	}
	msg := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"charge:order-1","tool":"charge_card","args":{"amount":4900}}}}`)
	b.Run("tools_call", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(srv.MCP().HandleMessage(ctx, msg)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkPrepareCommit measures one fresh action through the server: fence_prepare of a new
// intent and fence_commit of its ticket, on the memory store.
func BenchmarkPrepareCommit(b *testing.B) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer eng.Close()
	srv, err := serve.New(eng, serve.Options{})
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		msg := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"charge:%d","tool":"charge_card","args":{"amount":4900}}}}`, i)
		out, err := json.Marshal(srv.MCP().HandleMessage(ctx, []byte(msg)))
		if err != nil {
			b.Fatal(err)
		}
		var resp struct {
			Result struct {
				StructuredContent serve.PrepareResult `json:"structuredContent"`
			} `json:"result"`
		}
		if err := json.Unmarshal(out, &resp); err != nil || resp.Result.StructuredContent.Ticket == nil {
			b.Fatalf("%v: %s", err, out)
		}
		commit, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": map[string]any{
			"name": "fence_commit", "arguments": map[string]any{"ticket": resp.Result.StructuredContent.Ticket, "result": "ok"}}})
		if _, err := json.Marshal(srv.MCP().HandleMessage(ctx, commit)); err != nil {
			b.Fatal(err)
		}
	}
}
