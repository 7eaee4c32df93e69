// Package doctest reads code that the project's docs print, so tests run the very code the
// docs give their readers.
package doctest

import (
	"os"
	"strings"
	"testing"
)

// CertsVerifier returns the Python verifier docs/CERTS.md prints (its first python block),
// read from path.
func CertsVerifier(t testing.TB, path string) string {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```python\n")
	script, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("%s has no python block", path)
	}
	return script
}
