package sqlite_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"testing"
)

// startSelf starts this test binary again as a helper process, run by prefix if one is given
// (unshare and its flags, say). -test.run=^$ runs no test: TestMain hands the process to the
// helper that env (added to this process's environment) names. See startProc for the rest.
func startSelf(t testing.TB, env []string, prefix ...string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return startProc(t, append(append([]string{}, prefix...), exe, "-test.run=^$"), env...)
}

// startProc starts argv with env added to this process's environment and its stderr on the
// test's; it is killed when the test ends. It returns the process, its standard input and its
// standard output, a line at a time.
func startProc(t testing.TB, argv []string, env ...string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killTree(cmd) })
	return cmd, in, bufio.NewScanner(out)
}
