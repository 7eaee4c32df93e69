package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Spawn starts argv as an MCP stdio server (with env added to ours), completes the handshake
// and returns it as a Conn. The child's stderr goes to stderr once the handshake succeeded
// (what it wrote before is passed on then); if the handshake fails, the returned error
// already carries the tail of it, so the failure stays one clear message.
func Spawn(ctx context.Context, argv, env []string, stderr io.Writer) (Conn, error) {
	g := &gate{w: stderr}
	s, err := mcpstdio.Start(ctx, mcpstdio.Config{Command: argv, Env: env, Stderr: g})
	if err != nil {
		return nil, err
	}
	if err := g.open(); err != nil {
		s.Close()
		return nil, err
	}
	return stdioConn{s}, nil
}

// gate holds what is written to it (up to maxHeld bytes) until open, then passes through.
type gate struct {
	mu     sync.Mutex
	w      io.Writer
	held   []byte
	opened bool
}

const maxHeld = 64 << 10

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.opened {
		return g.w.Write(p)
	}
	if room := maxHeld - len(g.held); room > 0 {
		g.held = append(g.held, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

func (g *gate) open() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opened = true
	_, err := g.w.Write(g.held)
	g.held = nil
	return err
}

type stdioConn struct{ s *mcpstdio.Session }

func (c stdioConn) CallTool(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error) {
	return c.s.CallTool(ctx, tool, args)
}

func (c stdioConn) Close() error { return c.s.Close() }

// maxPages bounds tools/list pagination against a server whose cursors never end.
const maxPages = 100

// listedNames reads the tools' names and the nextCursor of one tools/list result as MCP's SDK
// clients read them: "tools", "name" and "nextCursor" spelled so, the last of each
// (jsonrpc.MemberValue). Before 2026-12-07 encoding/json read it, which also took "Tools" and
// kept the last, so the probe refused a tool every client sees and took one none does
// (TestProbeReadsTheListingAsTheSDKsReadIt). A tool whose name is not a string is left out.
func listedNames(raw json.RawMessage) (names []string, next string, err error) {
	if !json.Valid(raw) {
		return nil, "", fmt.Errorf("tools/list result is not valid JSON")
	}
	if i := jsonrpc.SkipSpace(raw, 0); raw[i] != '{' && string(raw[i:]) != "null" {
		return nil, "", fmt.Errorf("tools/list result is not a tool list: %.100s", raw)
	}
	var tools []json.RawMessage
	if v := jsonrpc.MemberValue(raw, "tools"); v != nil && json.Unmarshal(v, &tools) != nil {
		return nil, "", fmt.Errorf("tools/list result: \"tools\" is not a list")
	}
	if v := jsonrpc.MemberValue(raw, "nextCursor"); v != nil && json.Unmarshal(v, &next) != nil {
		return nil, "", fmt.Errorf("tools/list result: \"nextCursor\" is not a string")
	}
	for _, t := range tools {
		if name := jsonrpc.MemberValue(t, "name"); len(name) > 0 && name[0] == '"' {
			names = append(names, jsonrpc.Unquote(name))
		}
	}
	return names, next, nil
}

// maxListing bounds the bytes of all of a listing's pages together: the names are kept, and a
// server whose cursors never end, each page of megabytes, held gigabytes of them.
const maxListing = 64 << 20

func (c stdioConn) ToolNames(ctx context.Context) ([]string, error) {
	var names []string
	cursor := ""
	total := 0
	for page := range maxPages {
		raw, err := c.s.ListTools(ctx, cursor)
		if err != nil {
			return nil, err
		}
		if total += len(raw); total > maxListing {
			return nil, fmt.Errorf("tools/list is longer than %d MiB (%d pages); a probe needs only the tool's name", maxListing>>20, page+1)
		}
		page, next, err := listedNames(raw)
		if err != nil {
			return nil, err
		}
		names = append(names, page...)
		if next == "" {
			return names, nil
		}
		cursor = next
	}
	return nil, fmt.Errorf("tools/list still had more pages after %d", maxPages)
}
