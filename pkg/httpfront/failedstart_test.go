package httpfront_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// An initialize whose server fails to start is answered with the reason, and its session is
// closed: a client that retries initialize (each time a new session) must not fill the
// gateway's sessions, or every client would be refused (503) until the failed ones were idle
// (30 minutes by default), even once the server could start.
func TestFailedStartHoldsNoSession(t *testing.T) {
	g := newGW(t, func(c *httpfront.Config, o *wrap.Options) {
		c.MaxSessions = 2
		o.Env = mcptest.Env(filepath.Join(t.TempDir(), "effects"), "exit")
	})
	for i := range 4 {
		r := g.mustPost("", nil, initBody)
		if r.status != http.StatusOK || len(r.raw) == 0 || !strings.Contains(r.raw[0], "did not start") {
			t.Fatalf("initialize %d: status %d %v, want the start failure", i, r.status, r.raw)
		}
		if r := g.mustPost(r.header.Get("Mcp-Session-Id"), nil, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); r.status != http.StatusNotFound {
			t.Fatalf("the failed session %d is still open: status %d %v", i, r.status, r.raw)
		}
	}
	if n := g.front.Sessions(); n != 0 {
		t.Fatalf("%d sessions open after failed starts, want 0", n)
	}
}
