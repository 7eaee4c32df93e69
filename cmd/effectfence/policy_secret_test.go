package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyInitWritesNoArgumentOfTheServer: a generated policy is made to be reviewed and
// committed; the server command's arguments can hold a key or a password (the official
// PostgreSQL server takes its connection URL as one), so the file names the program alone.
// Here a secret-looking path stands for such an argument.
func TestPolicyInitWritesNoArgumentOfTheServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const secret = "sk_live_POLICYinit7Z"
	file := filepath.Join(dir, "policy.yaml")
	r := runBinary(t, []string{"XDG_STATE_HOME=" + filepath.Join(dir, "state")}, "", "policy", "init", "-o", file, "--",
		effectfence(t), "demo-server", "--latency", "1ms", "--effects", filepath.Join(dir, secret))
	if r.code != exitOK {
		t.Fatalf("policy init: exit %d %s", r.code, r.stderr)
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(src), secret) || !strings.Contains(string(src), "effectfence (and 5 arguments, not written here") {
		t.Fatalf("the generated policy:\n%s", src)
	}
	if r := runBinary(t, nil, "", "policy", "check", file); r.code != exitOK {
		t.Fatalf("policy check: %s %s", r.stdout, r.stderr)
	}
}
