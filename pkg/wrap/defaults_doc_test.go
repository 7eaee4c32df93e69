package wrap_test

import (
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// docNumber reads the number a doc states for a default: the first group of pattern's first
// match in path (docs relative to the repository root). A reworded sentence fails the test.
func docNumber(t *testing.T, path, pattern string) float64 {
	t.Helper()
	b, err := os.ReadFile("../../" + path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(pattern).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("%s no longer states this default (no match of %q)", path, pattern)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %q is not a number: %v", path, m[1], err)
	}
	return n
}

// TestWaitsAsDocumented: the waits docs/RELIABILITY.md states and no test can sit through
// (an elicitation answered by nobody, a hook that never returns) are the constants wrap
// uses: the elicitation's context times out after DefaultElicitWait when Options.ElicitWait
// is unset (the binary never sets it), and a library hook without a timeout or retries gets
// DefaultHookTimeout and DefaultHookRetries, retried after HookBackoff, doubling. A policy
// file's hook gets docs/policy.md's defaults (pkg/policy TestOnUnknownDefaultsAsDocumented,
// TestHookRetriesAsThePolicySays).
func TestWaitsAsDocumented(t *testing.T) {
	const reliab = "docs/RELIABILITY.md"
	for _, c := range []struct {
		name    string
		code    time.Duration
		pattern string
		unit    time.Duration
	}{
		{"DefaultElicitWait", wrap.DefaultElicitWait, `an error or no answer within ([0-9]+)\s+minutes give today's refusal`, time.Minute},
		{"DefaultHookTimeout", wrap.DefaultHookTimeout, `Each\s+delivery has a timeout \(default ([0-9]+) s\)`, time.Second},
		{"HookBackoff", wrap.HookBackoff, `backoff from ([0-9]+) ms\s+doubling`, time.Millisecond},
	} {
		if want := time.Duration(docNumber(t, reliab, c.pattern) * float64(c.unit)); c.code != want {
			t.Errorf("wrap.%s is %v; %s says %v", c.name, c.code, reliab, want)
		}
	}
	if want := int(docNumber(t, reliab, `is retried \(default ([0-9]+) times`)); wrap.DefaultHookRetries != want {
		t.Errorf("wrap.DefaultHookRetries is %d; %s says %d", wrap.DefaultHookRetries, reliab, want)
	}
}
