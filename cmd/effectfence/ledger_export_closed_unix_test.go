//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestExportToAClosedStdoutWarns: `ledger export >&-` (stdout closed) exited 0 and said
// nothing: Go's runtime opens /dev/null in place of a closed standard descriptor, and the
// export was written there. It now warns on stderr. It cannot fail: a launcher that discards
// a child's output may open /dev/null the same way (read and write: Python's
// subprocess.DEVNULL), and exporting to /dev/null on purpose is no error; `> /dev/null`, which
// a shell opens for writing only, and a file, get no warning.
func TestExportToAClosedStdoutWarns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.db")
	seedCLI(t, path)
	bin := binaryFor(t, []string{"ledger"})
	run := func(redirect string) (string, error) {
		sh := exec.Command("sh", "-c", `"$0" ledger export --ledger "$1" `+redirect, bin, path, filepath.Join(dir, "export.jsonl"))
		sh.Env = append(os.Environ(), "NO_COLOR=1", store.EnvLedger+"=", "GORACE=atexit_sleep_ms=0")
		var errb strings.Builder
		sh.Stderr = &errb
		err := sh.Run()
		return errb.String(), err
	}
	const warning = "stdout is /dev/null open for reading and writing, as when stdout was closed at start (>&-)"
	if stderr, err := run(">&-"); err != nil || !strings.Contains(stderr, warning) {
		t.Errorf("export >&-: %v, stderr %q; want exit 0 and the warning", err, stderr)
	}
	for _, redirect := range []string{"> /dev/null", `> "$2"`} {
		if stderr, err := run(redirect); err != nil || stderr != "" {
			t.Errorf("export %s: %v, stderr %q; want exit 0 and nothing said", redirect, err, stderr)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "export.jsonl")); err != nil || !strings.Contains(string(b), `"end"`) {
		t.Errorf("export to a file (%v): %.300s", err, b)
	}
}
