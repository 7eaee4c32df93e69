package httpback

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestReadBoundsAsDocumented: the tests lower tailWait and budgetWait; the bounds on reading
// an answer are the ones docs/gateway-backend.md promises.
func TestReadBoundsAsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/gateway-backend.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(b)), " ")
	for _, s := range []string{
		"the body is read for at most 64 KiB and 5 s",
		"is cut off 5 s later and the response stands",
		"A message that finds no room in the budget within a minute is given up as too large",
	} {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/gateway-backend.md no longer says %q", s)
		}
	}
	if tailWait != 5*time.Second {
		t.Errorf("tailWait is %v; docs/gateway-backend.md says 5 s", tailWait)
	}
	if budgetWait != time.Minute {
		t.Errorf("budgetWait is %v; docs/gateway-backend.md says a minute", budgetWait)
	}
	if maxMessage != 64<<20 {
		t.Errorf("maxMessage is %d; docs/gateway-backend.md says 64 MiB", maxMessage)
	}
}
