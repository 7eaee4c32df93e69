package policy

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestOnUnknownDefaultsAsDocumented: an on_unknown hook that leaves out retries and timeout
// gets the defaults of docs/policy.md's table, as parsed from a real file's text.
func TestOnUnknownDefaultsAsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	row := func(key string) string {
		t.Helper()
		m := regexp.MustCompile("\\| `" + key + "` \\| [^|]* \\| ([^ |]+) \\|").FindSubmatch(b)
		if m == nil {
			t.Fatalf("docs/policy.md's on_unknown table has no default for %s", key)
		}
		return string(m[1])
	}
	timeout, err := time.ParseDuration(row("timeout"))
	if err != nil {
		t.Fatal(err)
	}
	retries, err := strconv.Atoi(row("retries"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse("p.yaml", []byte("version: 1\non_unknown:\n  command: [notify]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h := p.OnUnknown; h == nil || h.Timeout != timeout || h.Retries != retries {
		t.Fatalf("on_unknown without retries and timeout: %+v; docs/policy.md says retries %d, timeout %v", h, retries, timeout)
	}
}
