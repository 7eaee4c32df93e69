package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// docs/gateway.md, --upstream-header: a header that HTTP cannot send (a control character in
// its value, a name that is not a token, no colon, no name) is refused when the command
// starts, with the usage exit code, never per request. Before 2026-12-04 a CR or LF in a value
// or a name such as X(A) passed the start, and every session's call to the upstream failed.
// The value, often a token, appears in no message; nor does a line whose name is malformed
// (it may be a pasted secret). Stdio mode (stdin at its end) and --listen alike.
func TestUpstreamHeaderRefusedAtStart(t *testing.T) {
	t.Parallel()
	const up = "http://127.0.0.1:1/mcp"
	cases := []struct {
		name, header, env, secret, want string
	}{
		{name: "CR in value", header: "X-Token: se\rcret-cr", secret: "cret-cr", want: "control character"},
		{name: "LF in value", header: "X-Token: abc\nX-Injected: secret-lf", secret: "secret-lf", want: "control character"},
		{name: "DEL in value", header: "X-Token: secret\x7fdel", secret: "del", want: "control character"},
		{name: "control in env value", env: "X-Token: secret\x01env", secret: "env", want: "control character"},
		{name: "non-token name", header: "X(Token): secret-paren", secret: "secret-paren", want: "the name holds"},
		{name: "secret as name", header: "Bearer sk_live_abc: x", secret: "sk_live_abc", want: "the name holds"},
		{name: "no colon", header: "sk_live_secretnocolon", secret: "secretnocolon", want: "want `NAME: VALUE`"},
		{name: "empty name", header: ": secret-noname", secret: "secret-noname", want: "want `NAME: VALUE`"},
	}
	for _, c := range cases {
		for _, listen := range []bool{false, true} {
			args := []string{"wrap", "--ledger", "memory", "--upstream", up}
			if c.header != "" {
				args = append(args, "--upstream-header", c.header)
			}
			if listen {
				args = append(args, "--listen", "127.0.0.1:0")
			}
			env := []string{"EFFECTFENCE_UPSTREAM_HEADERS=" + c.env}
			res := runRefused(t, env, args...)
			if res.code != exitUsage || !strings.Contains(res.stderr, "upstream header") || !strings.Contains(res.stderr, c.want) {
				t.Errorf("%s (listen %v): exit %d, want %d with %q; stderr:\n%s", c.name, listen, res.code, exitUsage, c.want, res.stderr)
			}
			if strings.Contains(res.stderr, c.secret) || strings.Contains(res.stdout, c.secret) {
				t.Errorf("%s (listen %v): the secret %q is shown:\nstdout: %s\nstderr: %s", c.name, listen, c.secret, res.stdout, res.stderr)
			}
			if res.stdout != "" {
				t.Errorf("%s (listen %v): stdout holds %q", c.name, listen, res.stdout)
			}
		}
	}
	// Valid headers still start: a tab in a value, every token character in a name.
	res := runBinary(t, []string{"EFFECTFENCE_UPSTREAM_HEADERS=X-A: a\tb"}, "", "wrap", "--ledger", "memory", "--upstream", up,
		"--upstream-header", "x!#$%&'*+-.^_`|~9: v")
	if res.code == exitUsage {
		t.Errorf("valid headers refused: %s", res.stderr)
	}
}

// runRefused runs the binary with stdin empty, expecting it to refuse its arguments: one still
// running after 30 seconds (a gateway that started listening) is stopped and reported with
// code -1.
func runRefused(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, effectfence(t), args...)
	cmd.Env = append(append(os.Environ(), "GORACE=atexit_sleep_ms=0"), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return result{-1, out.String(), errb.String()}
	case errors.As(err, &ee):
		return result{ee.ExitCode(), out.String(), errb.String()}
	case err != nil:
		t.Fatal(err)
	}
	return result{0, out.String(), errb.String()}
}
