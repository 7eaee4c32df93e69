package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// `ledger check` of a ledger whose index (LEDGER-shm) was replaced while a process used it
// (copied back over itself, say: a new file with the same bytes). Given the ledger by a
// relative path, check said the file was open in that process "under another name", naming
// the very path it was given as that other name, and advised undoing a move that never
// happened; given the same file by its absolute path, it did not. A relative path is now
// compared as the absolute one it names: both spellings get one verdict. A real holder process
// on a real SQLite file.
func TestCheckOfARelativePathNamesNoOtherName(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	dir := t.TempDir()
	path, effects := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "effects")
	h := startHelper(t, "hold", path, effects)
	if h.line != "admitted" {
		t.Fatalf("holder: %q", h.line)
	}
	defer h.kill9(t)
	b, err := os.ReadFile(path + "-shm")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+"-shm.new", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+"-shm.new", path+"-shm"); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	var verdicts []string
	for _, name := range []string{path, "ledger.db", "./ledger.db"} {
		code, out, errOut := runCLI(t, "", "ledger", "check", "--ledger", name)
		if strings.Contains(out, "under another name") {
			t.Errorf("ledger check --ledger %s = %d: the holder (process %d) uses no other name:\n%s%s", name, code, h.cmd.Process.Pid, out, errOut)
		}
		verdicts = append(verdicts, strconv.Itoa(code)+" "+strings.SplitN(out, "\n", 3)[1])
	}
	if verdicts[0] != verdicts[1] || verdicts[0] != verdicts[2] {
		t.Errorf("one file, three spellings, verdicts %q", verdicts)
	}
}
