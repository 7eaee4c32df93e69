package wrap_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"time"
)

// ledgerCmd runs `effectfence ledger args...` on r's ledger, as an operator would, and returns
// its exit code and its stderr; ledgerOut gives its stdout too.
func (r *rig) ledgerCmd(args ...string) (int, string) {
	code, _, stderr := r.ledgerOut(args...)
	return code, stderr
}

func (r *rig) ledgerOut(args ...string) (int, string, string) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, efBin, append([]string{"ledger"}, append(args, "--ledger", r.ledger)...)...)
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "GORACE=atexit_sleep_ms=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	case err != nil:
		r.t.Fatalf("effectfence ledger %v: %v", args, err)
	}
	return 0, out.String(), errb.String()
}
