//go:build unix

package scan

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestListPublishedHandshakeTimeoutSaysSo: a server that never answers the handshake gets
// an error that names the bound, as one that never answers tools/list does.
func TestListPublishedHandshakeTimeoutSaysSo(t *testing.T) {
	t.Parallel()
	_, err := ListPublished(context.Background(), RunConfig{Command: []string{"sh", "-c", "exec sleep 30"}, Timeout: 300 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "did not complete the MCP handshake within 300ms") {
		t.Fatalf("err = %v", err)
	}
}
