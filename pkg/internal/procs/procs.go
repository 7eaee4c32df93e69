// Package procs reads the process tree from /proc for the test harnesses that kill or stop a
// process's children (the history checker's nemesis, private PostgreSQL clusters). Where there
// is no /proc it finds nothing.
package procs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Children lists the pids whose parent is ppid; zombies (exited, not yet reaped) only when
// zombies is set.
func Children(ppid int, zombies bool) []int {
	want := strconv.Itoa(ppid)
	return scan(func(f []string) bool { return (zombies || f[0] != "Z") && f[1] == want })
}

// Group lists the pids of process group pgid that are not zombies.
func Group(pgid int) []int {
	want := strconv.Itoa(pgid)
	return scan(func(f []string) bool { return f[0] != "Z" && f[2] == want })
}

// scan lists the pids whose /proc/PID/stat fields from the state on (state, ppid, pgrp, ...)
// match.
func scan(match func(fields []string) bool) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses; the last ')'
		// ends it.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(b[i+1:])); len(f) >= 3 && match(f) {
			out = append(out, pid)
		}
	}
	return out
}
