package serve_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// BenchmarkReplay measures a duplicate prepare of a done intent: straight into the engine, and
// as an MCP tools/call message through the server (schema check, decode, encode), both on the
// memory store, so the difference is what the MCP layer costs.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	eng, req := doneIntent(b)
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

// BenchmarkServeReplay measures a duplicate prepare sent one at a time through Serve over
// pipes (the router, its lane and the line writer on top of BenchmarkReplay's tools_call).
func BenchmarkServeReplay(b *testing.B) {
	ctx := context.Background()
	eng, _ := doneIntent(b)
	srv, err := serve.New(eng, serve.Options{})
	if err != nil {
		b.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, inR, outW) }()
	out := bufio.NewReader(outR)
	send := func(line string) []byte {
		if _, err := inW.Write([]byte(line + "\n")); err != nil {
			b.Fatal(err)
		}
		resp, err := out.ReadBytes('\n')
		if err != nil {
			b.Fatal(err)
		}
		return resp
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)
	if _, err := inW.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n")); err != nil {
		b.Fatal(err)
	}
	msg := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"charge:order-1","tool":"charge_card","args":{"amount":4900}}}}`
	for b.Loop() {
		if resp := send(msg); !bytes.Contains(resp, []byte(`"already_done"`)) {
			b.Fatalf("answered %s", resp)
		}
	}
	inW.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// doneIntent is an engine on the memory store holding one done intent, and its request.
func doneIntent(b *testing.B) (*fence.Engine, fence.Request) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	b.Cleanup(func() { eng.Close() })
	req := fence.Request{Intent: "charge:order-1", Tool: "charge_card", Args: json.RawMessage(`{"amount":4900}`)}
	adm, err := eng.Prepare(ctx, req)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`)); err != nil {
		b.Fatal(err)
	}
	return eng, req
}
