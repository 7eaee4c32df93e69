package probe

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWitnessTimeoutAsDocumented: a witness command gets docs/probe-and-demo.md's "within 30
// seconds" when no timeout is given (the probe command gives none).
func TestWitnessTimeoutAsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/probe-and-demo.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`A witness that has not finished within ([0-9]+) seconds fails`).FindSubmatch([]byte(strings.Join(strings.Fields(string(b)), " ")))
	if m == nil {
		t.Fatal("docs/probe-and-demo.md no longer states the witness's timeout")
	}
	secs, _ := strconv.Atoi(string(m[1]))
	if want := time.Duration(secs) * time.Second; DefaultWitnessTimeout != want {
		t.Fatalf("DefaultWitnessTimeout is %v; docs/probe-and-demo.md says %v", DefaultWitnessTimeout, want)
	}
}
