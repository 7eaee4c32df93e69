//go:build unix

package mcpstdio_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Lines sent while another is being written go out together in one write (jsonrpc.Writer).
// When that write fails part way (the server exits before it has read all of it), a request
// whose whole line went out before the failure may have been read, and run, by the server: its
// Call must not say it was not sent (a proxy frees such a call for a retry, which runs it a
// second time). Here the server reads a large request, then the small one written behind it,
// runs that one and exits, while a large request written after it is still stuck in the pipe.
// Before, every request of the failed write got ErrNotSent, the one that ran included.
func TestRequestWrittenWholeBeforeAFailedWriteIsNotNotSent(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh")
	}
	ran := filepath.Join(t.TempDir(), "ran")
	script := `read -r line
printf '%s\n' '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"sh","version":"1"}}}'
read -r line
sleep 1
read -r line
read -r line
printf '%s\n' "$line" > "$0"
exit 9`
	s := start(t, mcpstdio.Config{Command: []string{"sh", "-c", script, ran}, Stderr: &syncBuf{}, InitTimeout: 10 * time.Second})
	pad := strings.Repeat("p", 256<<10) // more than a pipe holds
	call := func(tag, pad string) <-chan error {
		ch := make(chan error, 1)
		go func() {
			_, err := s.CallTool(context.Background(), "charge", json.RawMessage(`{"tag":"`+tag+`","pad":"`+pad+`"}`))
			ch <- err
		}()
		return ch
	}
	first := call("first", pad) // its write waits for the server to read
	// The small request must come after the first one's write began: wait until the server's
	// stdin pipe is full (the first line is longer than it holds), where /proc lets the test
	// see it, and give it time where it does not (under load, a fixed pause let the small
	// request go out first: CI at 7368e50).
	seen := pipeFills(s.Pid(), 5*time.Second)
	t.Logf("the first write seen filling the pipe: %v", seen)
	if !seen {
		time.Sleep(300 * time.Millisecond)
	}
	small := call("small", "") // gathered behind it
	time.Sleep(200 * time.Millisecond)
	last := call("last", pad) // gathered behind the small one, in the same write
	errFirst, errSmall, errLast := <-first, <-small, <-last
	b, err := os.ReadFile(ran)
	if err != nil || !strings.Contains(string(b), `"tag":"small"`) {
		t.Fatalf("the server did not run the small request (%v): %.200q; errors: %v / %v / %v", err, b, errFirst, errSmall, errLast)
	}
	if errors.Is(errSmall, mcpstdio.ErrNotSent) {
		t.Fatalf("the request the server read and ran was reported not sent: %v", errSmall)
	}
	var ee *mcpstdio.ExitError
	if !errors.As(errSmall, &ee) {
		t.Fatalf("the request the server ran before it exited: %v; want an ExitError (outcome unknown)", errSmall)
	}
	if errors.Is(errFirst, mcpstdio.ErrNotSent) {
		t.Fatalf("the first request, read whole: %v", errFirst)
	}
	if !errors.Is(errLast, mcpstdio.ErrNotSent) {
		t.Fatalf("the last request, never written whole: %v; want ErrNotSent", errLast)
	}
}
