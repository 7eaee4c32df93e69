// Package cmdtest builds the real effectfence binary once per test process and runs it, so
// tests exercise exactly what a user runs: flags, exit codes, stdout and stderr, child
// processes.
package cmdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Build compiles github.com/effectfence/effectfence/cmd/effectfence into dir and returns the
// binary's path. When the test binary runs under the race detector, so does the built one.
func Build(dir string) (string, error) {
	return build(dir, "effectfence", "github.com/effectfence/effectfence/cmd/effectfence", raceEnabled)
}

// BuildServer compiles mcptest's server as a program of its own (mcptestserver) into dir,
// without the race detector whatever the tests run with, and returns its path: a server that
// stands behind the process a test is about, at a fraction of the CPU of the race-built test
// binary re-executed in its place.
func BuildServer(dir string) (string, error) {
	return build(dir, "mcptestserver", "github.com/effectfence/effectfence/pkg/internal/mcptest/mcptestserver", false)
}

func build(dir, name, pkg string, race bool) (string, error) {
	bin := filepath.Join(dir, name)
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	args := []string{"build", "-o", bin}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build %s: %w", name, err)
	}
	return bin, nil
}

// Main is a TestMain body: it builds the binary into a temporary directory, stores its path in
// *bin, runs the tests and removes the directory. It returns the exit code for os.Exit.
func Main(m *testing.M, bin *string) int {
	dir, err := os.MkdirTemp("", "effectfence-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// Result is one finished run of the binary.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Run runs bin with args (and env added to ours), waits at most five minutes, and fails the
// test if it could not be run at all. A non-zero exit is a result, not a failure.
func Run(t testing.TB, env []string, bin string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	// A -race child sleeps a second at exit unless told not to.
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %s %s: %v", bin, strings.Join(args, " "), err)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not finish within five minutes; stderr:\n%s", bin, strings.Join(args, " "), errb.String())
	}
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}
