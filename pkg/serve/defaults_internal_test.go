package serve

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestRequestWaitAsDocumented: a large line that finds no room in the request budget waits
// as long as docs/serve.md says before it is skipped ("within a minute").
func TestRequestWaitAsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), "a line that finds no room within a minute is skipped unread") {
		t.Fatal("docs/serve.md no longer says how long a line waits for room")
	}
	if requestWait != time.Minute {
		t.Fatalf("requestWait is %v; docs/serve.md says a minute", requestWait)
	}
}
