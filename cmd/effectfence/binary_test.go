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

// Two builds of this package serve the tests. effectfence(t) is built as the tests are, with
// the race detector under -race: it is what a test names itself, and what runBinary runs for
// the commands whose goroutines run side by side for as long as the process lives (wrap,
// serve, probe, demo, demo-server, and policy init and scan --run, which talk to a server
// they start). plainBinary(t) is built without the detector: runBinary runs it for the
// one-shot commands (ledger views, policy check, scan of files, version, usage errors), whose
// code the detector watches in this process instead (runCLI runs a command in-process; the
// spill writer, their one goroutine beside the command's, has its own tests here). A child
// built with -race spends 4-6 times the CPU of a plain one, and such children took about 30 %
// of CI's two cores.

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

// longRunning are the commands whose processes run goroutines side by side while they live,
// with policy init and scan's --run, which start the server given after "--" and talk to it:
// runBinary runs them under the race detector when the tests have it.
var longRunning = map[string]bool{"wrap": true, "serve": true, "probe": true, "demo": true, "demo-server": true, "init": true, "--run": true}

// binaryFor is the build runBinary runs args with: effectfence(t) when a word before any "--"
// names a long-running command (a flag's value that happens to be one errs toward the
// detector), plainBinary(t) otherwise.
func binaryFor(t *testing.T, args []string) string {
	t.Helper()
	for _, a := range args {
		if a == "--" {
			break
		}
		if longRunning[a] {
			return effectfence(t)
		}
	}
	return plainBinary(t)
}

// plainBuilds serializes the builds without the race detector (plainBinary and the previous
// builds of previous_build_test.go): all are made with -trimpath, so the first compiles the
// dependencies into the build cache once and the others find them there, where, started
// together on a cold cache, each compiled them (about 150 CPU-seconds apiece).
var plainBuilds sync.Mutex

// plainBinary is the binary built without the race detector: what runBinary runs for one-shot
// commands, and where a test measures a process's memory as a user's would be (the
// detector's shadow memory would blur what the command itself holds). Without -race it is
// effectfence(t).
var (
	plainOnce sync.Once
	plainPath string
	plainErr  error
)

func plainBinary(t *testing.T) string {
	t.Helper()
	bin := effectfence(t)
	if !raceEnabled {
		return bin
	}
	plainOnce.Do(func() {
		plainPath = filepath.Join(filepath.Dir(bin), "effectfence-plain") // removed with it by TestMain
		plainBuilds.Lock()
		defer plainBuilds.Unlock()
		if out, err := exec.Command("go", "build", "-trimpath", "-o", plainPath, ".").CombinedOutput(); err != nil {
			plainErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if plainErr != nil {
		t.Fatal(plainErr)
	}
	return plainPath
}

// result is one finished run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

// runBinary runs the binary with args, stdin and env added to ours, for at most five minutes:
// a bound on a hang, not on speed (an export of huge records, built with -race, took 88 s on a
// slow 2-core VM while the rest of CI ran, and past two minutes under more load).
func runBinary(t *testing.T, env []string, stdin string, args ...string) result {
	t.Helper()
	bin := binaryFor(t, args) // built first: a build on a loaded machine is not the command's time
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("effectfence %s did not finish within five minutes; stderr:\n%s", strings.Join(args, " "), errb.String())
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
