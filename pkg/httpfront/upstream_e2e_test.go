package httpfront_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/httpback"
)

// A remote upstream behind a gateway, from an HTTP client: the real server-everything in its
// Streamable HTTP mode behind `wrap --listen --upstream`. The listing is the server's, byte
// for byte; identical calls of a fenced tool run once and are replayed. (From a stdio client:
// TestPolicyInitAndWrapUpstream in cmd/effectfence.)
func TestGatewayInFrontOfARemoteServer(t *testing.T) {
	t.Parallel()
	everything, _ := filepath.Abs("../../.peers/node_modules/.bin/mcp-server-everything")
	if _, err := os.Stat(everything); err != nil {
		t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
	}
	up := startEverythingHTTP(t, everything)
	gw, stop, err := startProcE(nil, "effectfence wrap: listening on ", binary(t), "wrap", "--ledger", filepath.Join(t.TempDir(), "l.db"),
		"--listen", "127.0.0.1:0", "--upstream", up.url, "--fence", "echo")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := func(url string) *httpback.Session {
		u := httpback.NewUpstream(httpback.Config{URL: url})
		t.Cleanup(func() { u.Close() })
		s, err := u.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	direct, through := open(up.url), open(gw)
	dl, err := direct.Call(ctx, "tools/list", nil)
	if err != nil {
		t.Fatal(err)
	}
	gl, err := through.Call(ctx, "tools/list", nil)
	if err != nil || string(gl) != string(dl) {
		t.Fatalf("tools/list through the gateway differs from the server's:\n%.300s\n%.300s\n%v", gl, dl, err)
	}
	var answers []string
	for range 3 {
		res, err := through.Call(ctx, "tools/call", json.RawMessage(`{"name":"echo","arguments":{"message":"once"}}`))
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, string(res))
	}
	if strings.Contains(answers[0], "effectfence/replayed") || !strings.Contains(answers[1], `"effectfence/replayed":true`) || !strings.Contains(answers[2], `"effectfence/replayed":true`) {
		t.Fatalf("identical fenced calls through the gateway: %v", answers)
	}
}
