package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestCloseReturnsWithAFrozenConnection: the database stops answering (netcut holds every
// byte, closes nothing) while a write is in flight; the write's context ends, and the process
// closes the store to exit. pgx closes a cancelled connection after sending the server a
// cancel request, which waits up to 15 s for a server that does not answer, and the pool's
// Close waited for that: a stopping wrap exited about 17 s after its input closed, long after
// an MCP client's SIGKILL. Close now returns within poolCloseWait, the sockets closing behind.
func TestCloseReturnsWithAFrozenConnection(t *testing.T) {
	t.Parallel()
	schema := testSchema(t)
	p, err := netcut.NewPostgres(pgHost(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	s := openThrough(t, p, schema)
	e := fence.New(s, fence.Config{})
	p.Freeze()
	t.Cleanup(p.Heal)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if adm, err := e.Prepare(ctx, fence.Request{Intent: "frozen:close", Tool: "charge", Args: []byte(`{"usd":1}`)}); err == nil {
		t.Fatalf("a claim through a frozen connection was answered: %+v", adm)
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// poolCloseWait and a margin for a busy machine; before, 14-15 s.
	if took := time.Since(start); took > poolCloseWait+5*time.Second {
		t.Fatalf("Close took %s with a frozen connection, want about %s", took.Round(100*time.Millisecond), poolCloseWait)
	}
}
