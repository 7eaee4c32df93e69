package httpback_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/effectfence/effectfence/pkg/httpback"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Reach a remote server, call a tool, and tell "did not run" from "may have run".
func ExampleNewUpstream() {
	ctx := context.Background()
	up := httpback.NewUpstream(httpback.Config{
		URL:    "https://mcp.example.com/mcp",
		Header: http.Header{"Authorization": {"Bearer ..."}}, // never logged
	})
	defer up.Close()          // DELETE of the session
	s, err := up.Session(ctx) // initialize on first use, again after the server lost the session
	if err != nil {
		fmt.Println("no session; nothing was sent:", err)
		return
	}
	res, err := s.Call(ctx, "tools/call", json.RawMessage(`{"name":"pay","arguments":{"cents":100}}`))
	var rpc *mcpstdio.RPCError
	switch {
	case err == nil:
		fmt.Println("result:", string(res)) // the server's bytes
	case errors.Is(err, mcpstdio.ErrNotSent):
		fmt.Println("did not reach the server, did not run:", err)
	case errors.As(err, &rpc):
		fmt.Println("the server answered with an error:", rpc.Message)
	default:
		fmt.Println("may have run; record unknown, never retry:", err)
	}
}
