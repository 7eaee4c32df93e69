package main

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

// TestPolicyInitTimeoutSaysWhichBound: a server that never answers (the handshake, or
// tools/list) gets an error naming --timeout and its value, not a bare "context deadline
// exceeded", and no file is written.
func TestPolicyInitTimeoutSaysWhichBound(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("sh server")
	}
	t.Parallel()
	bin := effectfence(t)
	out := t.TempDir() + "/p.yaml"
	cmd := exec.Command(bin, "policy", "init", "--timeout", "500ms", "-o", out, "--", "sh", "-c", "exec sleep 30")
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit %v, want 1; stderr %q", err, errb.String())
	}
	if !strings.Contains(errb.String(), "within 500ms (--timeout)") {
		t.Errorf("stderr %q does not say which bound passed", errb.String())
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("%s was written (stat: %v)", out, err)
	}
}
