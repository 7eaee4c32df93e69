package fence

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// An owner string names the process holding a claim:
//
//	host/pid/start/boot/pidns
//
// start is the process's start time in clock ticks since boot (/proc/PID/stat field 22), boot
// the kernel's boot id (/proc/sys/kernel/random/boot_id), pidns the inode of the PID namespace
// the pid is counted in (/proc/self/ns/pid). A pid means a process only within one PID
// namespace of one boot of one kernel, so a checker judges an owner only when boot and pidns
// are its own and its /proc shows its own namespace; pid plus start time then tell a live
// process from a dead one whose pid was reused. The host name is informational: a container
// with its own UTS name but the host's PID namespace is judged soundly, and two hosts with one
// name are told apart by their boot ids. Owner strings of older versions (host/pid/start) do
// not say which namespace their pid is counted in and are judged CannotTell.

// Liveness is what a checker can tell about the process named by an owner string.
type Liveness int

const (
	// CannotTell: the owner is on another host, another boot, another PID namespace, or its
	// owner string does not say enough. Its claim waits for its lease; see Engine.
	CannotTell Liveness = iota
	// Alive: the owner is a running process this checker can see.
	Alive
	// Dead: the owner's process is gone (no such pid, a zombie, or the pid now belongs to a
	// process started at another time).
	Dead
)

func (l Liveness) String() string {
	switch l {
	case Alive:
		return "alive"
	case Dead:
		return "dead"
	}
	return "cannot tell"
}

// local is what this process knows about where it runs.
type local struct {
	owner string
	boot  string
	pidns string
	// sound: /proc shows this process's own PID namespace (/proc/self is our pid), so a pid
	// read there means what the owner strings of this namespace mean.
	sound bool
}

var (
	localOnce sync.Once
	here      local
)

func whereAmI() local {
	localOnce.Do(func() {
		host, _ := os.Hostname()
		if host == "" {
			host = "localhost"
		}
		host = strings.ReplaceAll(host, "/", "_")
		pid := os.Getpid()
		b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
		here.boot = strings.TrimSpace(string(b))
		if ns, err := os.Readlink("/proc/self/ns/pid"); err == nil {
			// "pid:[4026531836]"
			here.pidns = strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
		}
		self, err := os.Readlink("/proc/self")
		here.sound = err == nil && self == strconv.Itoa(pid) && here.boot != "" && here.pidns != ""
		start, _ := procStat(pid)
		here.owner = fmt.Sprintf("%s/%d/%d/%s/%s", host, pid, start, here.boot, here.pidns)
	})
	return here
}

// LocalOwner returns the owner string of this process.
func LocalOwner() string { return whereAmI().owner }

// OwnerLiveness tells whether the process named by owner is alive, dead, or beyond what this
// process can see. It answers Dead only when it is sure, and CannotTell whenever the owner's
// pid is not counted in a namespace this process can inspect: a false "dead" would fence (or,
// for a re-run-safe tool, re-run) a call that is still running.
func OwnerLiveness(owner string) Liveness {
	me := whereAmI()
	if owner == me.owner {
		return Alive
	}
	parts := strings.Split(owner, "/")
	if len(parts) != 5 || !me.sound || parts[3] != me.boot || parts[4] != me.pidns {
		return CannotTell
	}
	pid, err1 := strconv.Atoi(parts[1])
	start, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 || start == 0 {
		return CannotTell
	}
	now, state := procStat(pid)
	switch {
	case state == 0 && processGone(pid):
		return Dead
	case state == 0:
		return CannotTell
	case state == 'Z' || state == 'X':
		return Dead // a zombie has stopped running; only its exit status waits to be reaped
	case now != start:
		return Dead // the pid was reused
	}
	return Alive
}

// OwnerDead reports whether OwnerLiveness is Dead.
func OwnerDead(owner string) bool { return OwnerLiveness(owner) == Dead }

// procStat reads the start time (field 22) and state (field 3) of /proc/PID/stat; state is 0
// when the file cannot be read.
func procStat(pid int) (start uint64, state byte) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	// The command name (field 2) may contain spaces and parentheses: fields resume after the
	// last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state), so starttime (field 22) is fields[19].
	if len(fields) < 20 || fields[0] == "" {
		return 0, 0
	}
	n, _ := strconv.ParseUint(fields[19], 10, 64)
	return n, fields[0][0]
}
