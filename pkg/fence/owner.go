package fence

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// An owner string names the process holding a claim: "host/pid/start", where start is the
// process's start time in clock ticks since boot (from /proc; "0" where /proc is absent). Pid
// plus start time tells a live process from a dead one whose pid was reused.

var (
	ownerOnce sync.Once
	ownerStr  string
	hostName  string
)

// LocalOwner returns the owner string of this process.
func LocalOwner() string {
	ownerOnce.Do(func() {
		hostName, _ = os.Hostname()
		if hostName == "" {
			hostName = "localhost"
		}
		pid := os.Getpid()
		ownerStr = fmt.Sprintf("%s/%d/%d", hostName, pid, procStart(pid))
	})
	return ownerStr
}

// OwnerDead reports whether owner names a process on this host that is no longer running (or
// whose pid now belongs to another process). It answers false when it cannot tell: an owner on
// another host, or an owner string it does not understand. A false "dead" would fence an intent
// that is running; a false "alive" only delays its fencing until the lease expires.
func OwnerDead(owner string) bool {
	LocalOwner()
	parts := strings.Split(owner, "/")
	if len(parts) != 3 || parts[0] != hostName {
		return false
	}
	pid, err1 := strconv.Atoi(parts[1])
	start, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return false
	}
	if processGone(pid) {
		return true
	}
	if start != 0 {
		if now := procStart(pid); now != 0 && now != start {
			return true
		}
	}
	return false
}

// procStart reads field 22 (starttime) of /proc/PID/stat, or 0 when unavailable.
func procStart(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may contain spaces and parentheses: fields resume after the
	// last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state), so starttime (field 22) is fields[19].
	if len(fields) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(fields[19], 10, 64)
	return n
}
