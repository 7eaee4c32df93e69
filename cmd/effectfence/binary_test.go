package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The real binary, built once per test process for the tests whose claim is about what a user
// runs (exit codes, what reaches stdout and stderr, files created).
var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

func TestMain(m *testing.M) {
	// A process built with -race sleeps a second before it exits unless GORACE says not to:
	// every child these tests start (the binary, this test binary as a helper, and what those
	// start in turn) inherits the setting, as the helpers that set it one by one already did.
	// This process read GORACE at its start: its own exit keeps the default.
	os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// effectfence returns the path of the binary built from this package (with the race detector
// when the tests run with it).
func effectfence(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "effectfence-cmd-test-"); binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "effectfence")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, ".")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// result is one finished run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs the binary with args, stdin and env added to ours, for at most two minutes.
func runBinary(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, effectfence(t), args...)
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("effectfence %s did not finish within two minutes; stderr:\n%s", strings.Join(args, " "), errb.String())
	}
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("effectfence %s: %v", strings.Join(args, " "), err)
	}
	return result{code, out.String(), errb.String()}
}
