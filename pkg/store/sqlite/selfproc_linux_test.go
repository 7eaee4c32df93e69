//go:build linux

package sqlite_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killTree kills cmd and every process under it, and returns once they are gone. A process
// started under a prefix (unshare -p --fork, nsenter) is a child of the prefix's process, which
// a kill of cmd alone leaves running: it then closed its ledger while the test's TempDir was
// being removed ("directory not empty", TestHolderWithAForeignProcIsJudgedByNobody in CI).
func killTree(cmd *exec.Cmd) {
	pids := append([]int{cmd.Process.Pid}, descendants(cmd.Process.Pid)...)
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	_ = cmd.Wait()
	for _, p := range pids[1:] {
		// Reaped by init once dead; a zombie holds no file.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
			if err != nil {
				break
			}
			if i := bytes.LastIndexByte(b, ')'); i > 0 && len(b) > i+2 && b[i+2] == 'Z' {
				break
			}
		}
	}
}

// descendants lists the processes under pid, read from /proc (children of each of its threads).
func descendants(pid int) []int {
	var out []int
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
				out = append(out, descendants(c)...)
			}
		}
	}
	return out
}
