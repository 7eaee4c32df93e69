package httpfront

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestStreamBoundsAsDocumented: the tests lower writeTimeout and maxBacklog; the bounds on a
// stream its client stops reading are the ones docs/gateway.md promises.
func TestStreamBoundsAsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), "once 64 MiB wait for it (the gateway never queues more for one stream, beside the batch it is writing, itself at most that: 128 MiB at worst) or once it has taken nothing for a minute (a part of 64 KiB of a write waited that long") {
		t.Fatal("docs/gateway.md no longer states the bounds on a stream its client stops reading")
	}
	if writeTimeout != time.Minute {
		t.Errorf("writeTimeout is %v; docs/gateway.md says a minute", writeTimeout)
	}
	if writeChunk != 64<<10 {
		t.Errorf("writeChunk is %d; docs/gateway.md says 64 KiB", writeChunk)
	}
	if maxBacklog != 64<<20 {
		t.Errorf("maxBacklog is %d; docs/gateway.md says 64 MiB", maxBacklog)
	}
}
