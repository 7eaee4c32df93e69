// Package doctest reads code that the project's docs print, so tests run the very code the
// docs give their readers.
package doctest

import (
	"bytes"
	"os"
	"os/exec"
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

// CertsVerifierRun returns a function that runs the Python verifier docs/CERTS.md prints
// (read from path) on one cert's JSON and returns what it printed on stdout, trimmed, and the
// process's error. The test is skipped when python3 is not installed.
func CertsVerifierRun(t testing.TB, path string) func(cert []byte) (string, error) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("skipping: python3 is not installed")
	}
	script := CertsVerifier(t, path)
	return func(cert []byte) (string, error) {
		cmd := exec.Command(py, "-c", script)
		cmd.Stdin = bytes.NewReader(cert)
		var out bytes.Buffer
		cmd.Stdout = &out
		err := cmd.Run()
		return strings.TrimSpace(out.String()), err
	}
}
