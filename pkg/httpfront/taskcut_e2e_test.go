package httpfront_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// TestTaskResultAskedAgainAfterACut: wrap's own tasks/result, which waits as long as the task
// runs, is cut by what stands between wrap and the server (a load balancer's read timeout, a
// reset), and so is the one resumption the transport allows. The task runs on in the server
// and tasks/result is a read, so wrap asks again and records the task's final result. Against
// server-everything's simulate-research-query (about 4 s) in its own Streamable HTTP mode,
// behind a proxy that cuts the first two streams of tasks/result: the duplicate sent while
// the task runs receives the report. Before 2026-12-03 the second cut left the outcome
// unknown: a task that completed was fenced until an operator cleared it.
func TestTaskResultAskedAgainAfterACut(t *testing.T) {
	t.Parallel()
	peers, _ := filepath.Abs("../../.peers")
	everything := filepath.Join(peers, "node_modules/.bin/mcp-server-everything")
	if _, err := os.Stat(everything); err != nil {
		t.Skip("skipping: npm peers are not installed; run scripts/install-peers")
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("skipping: node is not installed")
	}
	server := startEverythingHTTP(t, everything)
	target, err := url.Parse(server.url)
	if err != nil {
		t.Fatal(err)
	}
	target.Path = "" // the proxy's own path, /mcp, is kept
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0) // the cuts are on purpose
	var cuts atomic.Int32
	const cutsWanted = 2
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		resume := r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != ""
		if (bytes.Contains(body, []byte(`"tasks/result"`)) || resume) && cuts.Add(1) <= cutsWanted {
			// Let the stream open, then cut the client's connection mid-answer.
			ctx, cancel := context.WithTimeout(r.Context(), 500*time.Millisecond)
			defer cancel()
			rp.ServeHTTP(w, r.WithContext(ctx))
			panic(http.ErrAbortHandler)
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)

	var stderr logBuf
	agent, err := mcpstdio.Start(context.Background(), mcpstdio.Config{
		Command: []string{binary(t), "wrap", "--ledger", filepath.Join(t.TempDir(), "ledger.db"), "--wait", "60s", "--upstream", proxy.URL + "/mcp"},
		Init:    json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{}},"clientInfo":{"name":"taskcut","version":"1"}}`),
		Stderr:  &stderr, InitTimeout: 60 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	handle, err := agent.Call(ctx, "tools/call", json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"cut streams"},"task":{"ttl":300000}}`))
	if err != nil || !strings.Contains(string(handle), `"taskId"`) {
		t.Fatalf("want the server's task handle, got %s %v", handle, err)
	}
	dup, err := agent.Call(ctx, "tools/call", json.RawMessage(`{"name":"simulate-research-query","arguments":{"topic":"cut streams"}}`))
	if err != nil || !strings.Contains(string(dup), "# Research Report: cut streams") {
		t.Fatalf("the duplicate of a task whose tasks/result streams were cut %d times was answered %s %v; want the task's final result\nwrap's log:\n%s", cuts.Load(), dup, err, stderr.String())
	}
	if n := cuts.Load(); n < cutsWanted {
		t.Fatalf("the proxy cut %d streams, want %d: the test did not cut what it means to", n, cutsWanted)
	}
}
