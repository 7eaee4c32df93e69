package mcpstdio

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestRoomWaitAsDocumented: the tests lower budgetWait (SetAnswerBudget); the wait of a
// session's reader for room in AnswerBudget is the minute docs/wrap.md promises.
func TestRoomWaitAsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/wrap.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), "An answer from the server that finds no room within a minute is skipped like a line over 64 MiB") {
		t.Fatal("docs/wrap.md no longer says how long an answer waits for room")
	}
	if budgetWait != time.Minute {
		t.Fatalf("budgetWait is %v; docs/wrap.md says a minute", budgetWait)
	}
	if MaxLine != 64<<20 {
		t.Fatalf("MaxLine is %d; docs/wrap.md says 64 MiB", MaxLine)
	}
}
