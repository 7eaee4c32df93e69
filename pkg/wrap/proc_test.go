package wrap_test

// The process-tree helpers read Linux's /proc. They compile everywhere; a test that needs them
// calls needProc first, which skips it where there is no /proc to read.

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// childPids lists the live children of pid, from /proc.
func childPids(pid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := procParent(n); ok && ppid == pid {
			out = append(out, n)
		}
	}
	return out
}

// procParent returns the parent of a live (not zombie) process.
func procParent(pid int) (int, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 || f[0] == "Z" {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

func alive(pid int) bool {
	_, ok := procParent(pid)
	return ok
}

func needProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc to see processes: " + err.Error())
	}
}
