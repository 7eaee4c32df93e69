package fence

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRetryAndPollAsDocumented: Settle's backoff is docs/RELIABILITY.md's ("backing off from
// 50 ms to 2 s"), and a wait that LISTEN/NOTIFY will wake still polls as often as
// docs/postgres.md says ("polling once a second remains as a safety net").
func TestRetryAndPollAsDocumented(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile("../../" + path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(b)), " ")
	}
	m := regexp.MustCompile(`backing off from ([0-9]+ ?m?s) to ([0-9]+ ?m?s), until`).FindStringSubmatch(read("docs/RELIABILITY.md"))
	if m == nil {
		t.Fatal("docs/RELIABILITY.md no longer states Settle's backoff")
	}
	first, _ := time.ParseDuration(strings.ReplaceAll(m[1], " ", ""))
	most, _ := time.ParseDuration(strings.ReplaceAll(m[2], " ", ""))
	if settleFirstWait != first || settleMaxWait != most {
		t.Errorf("Settle backs off from %v to %v; docs/RELIABILITY.md says from %s to %s", settleFirstWait, settleMaxWait, m[1], m[2])
	}
	p := regexp.MustCompile(`polling (once a second|every [0-9]+ s) remains as a safety net`).FindStringSubmatch(read("docs/postgres.md"))
	if p == nil {
		t.Fatal("docs/postgres.md no longer states how often a notified wait polls")
	}
	if p[1] != "once a second" || notifiedPoll != time.Second {
		t.Errorf("a notified wait polls every %v; docs/postgres.md says %q", notifiedPoll, p[1])
	}
}
