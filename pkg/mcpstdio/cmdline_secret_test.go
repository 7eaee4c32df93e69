package mcpstdio_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// TestErrorsNameTheProgramNotItsArguments: a server's command line can carry a secret (an API
// key flag, mcp-remote's Authorization header). mcpstdio's errors reach the ledger as a call's
// reason under wrap (a session that ended during the call; a restart that failed before it was
// sent), so they name the program only (docs/privacy.md: a reason holds the server's words).
func TestErrorsNameTheProgramNotItsArguments(t *testing.T) {
	const secret = "sk_live_ARGV9K3W"
	for name, mode := range map[string]string{"exits at start": "exit", "dies in a call": ""} {
		t.Run(name, func(t *testing.T) {
			cfg, _, _ := config(t, mode)
			cfg.Command = append(cfg.Command, "--api-key="+secret)
			c := mcpstdio.NewChild(cfg)
			defer c.Close()
			s, err := c.Session(context.Background())
			if mode == "" {
				if err != nil {
					t.Fatal(err)
				}
				_, err = s.CallTool(context.Background(), "die", []byte(`{}`))
			}
			var ee *mcpstdio.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("want an ExitError, got %v", err)
			}
			if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "MCP server") {
				t.Fatalf("the error names the command line: %v", err)
			}
		})
	}
	cfg, _, _ := config(t, "")
	cfg.Command = []string{"/nonexistent/mcp-server", "--api-key=" + secret}
	_, err := mcpstdio.NewChild(cfg).Session(context.Background())
	if err == nil || strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), "mcp-server") {
		t.Fatalf("a start that failed: %v; want the program named without its arguments", err)
	}
}
