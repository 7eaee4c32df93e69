package mcpstdio_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Start a server, list its tools, call one, and tell a tool error from a transport failure.
func ExampleStart() {
	ctx := context.Background()
	s, err := mcpstdio.Start(ctx, mcpstdio.Config{
		Command: []string{"npx", "-y", "@modelcontextprotocol/server-memory"},
		Stderr:  os.Stderr,
	})
	if err != nil {
		fmt.Println("cannot start:", err)
		return
	}
	defer s.Close()
	tools, _ := s.ListTools(ctx, "") // the raw result, byte for byte as the server wrote it
	fmt.Printf("%d bytes of tools\n", len(tools))

	res, err := s.CallTool(ctx, "read_graph", json.RawMessage(`{}`))
	var rpc *mcpstdio.RPCError
	var exit *mcpstdio.ExitError
	switch {
	case err == nil:
		fmt.Println("result:", string(res)) // may still be a tool error: "isError": true
	case errors.Is(err, mcpstdio.ErrNotSent):
		fmt.Println("not sent, did not run:", err)
	case errors.As(err, &rpc):
		fmt.Println("refused by the server:", rpc.Message)
	case errors.As(err, &exit):
		fmt.Println("the server died mid-call; outcome unknown:", exit.Why)
	}
}
