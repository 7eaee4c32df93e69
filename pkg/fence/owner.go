package fence

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
// process from a dead one whose pid was reused. Linux shows a start time shifted by the
// boottime offset of the reader's time namespace (unshare --time, CRIU's restored containers),
// so two processes of one PID namespace in two time namespaces read different start times for
// one process: the start recorded and the start compared are both counted in the initial
// time namespace's ticks (bootOffset). The host name is informational: a container
// with its own UTS name but the host's PID namespace is judged soundly, and two hosts with one
// name are told apart by their boot ids. Owner strings of older versions (host/pid/start) do
// not say which namespace their pid is counted in and are judged CannotTell. A claim may add a
// carrier to the host field (host+g<pgid>.<start>: carrier.go), which versions before it read
// as part of the host name, not used for judging.

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
	// read there means what the owner strings of this namespace mean, and this process knows
	// its time namespace's boottime offset in whole ticks (bootOffset).
	sound bool
	// offset is that boottime offset, in clock ticks: what /proc/PID/stat adds to every start
	// time this process reads.
	offset int64
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
		// "/" parts an owner string's fields; "+" parts the host from a claim's carrier. A host
		// name is bytes (sethostname takes any): written as the ledger keeps it (ledgerText),
		// so that this process knows its own claims (Engine.mine).
		host = ledgerText(strings.NewReplacer("/", "_", "+", "_").Replace(host))
		pid := os.Getpid()
		b, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
		here.boot = machineBoot(strings.TrimSpace(string(b)), os.Getenv(MachineIDEnv))
		if ns, err := os.Readlink("/proc/self/ns/pid"); err == nil {
			// "pid:[4026531836]"
			here.pidns = strings.TrimSuffix(strings.TrimPrefix(ns, "pid:["), "]")
		}
		self, err := os.Readlink("/proc/self")
		off, known := bootOffset()
		here.offset = off
		here.sound = err == nil && self == strconv.Itoa(pid) && here.boot != "" && here.pidns != "" && known
		start, _ := procStat(pid)
		if n := int64(start) - off; here.sound && start != 0 && n > 0 {
			start = uint64(n)
		} else {
			// A start this process cannot state in the initial namespace's ticks, or read at
			// all: a /proc of another namespace shows another process at this pid, whose start
			// recorded here made this live process "dead" (pid reused) to a judge of its own
			// namespace. Judged by nobody.
			start = 0
		}
		here.owner = fmt.Sprintf("%s/%d/%d/%s/%s", host, pid, start, here.boot, here.pidns)
	})
	return here
}

// MachineIDEnv names the environment variable that tells apart machines sharing one boot id:
// virtual machines cloned from one snapshot keep the snapshot's boot id, and the initial PID
// namespace has the same inode on every Linux kernel, so without it a clone judges another
// clone's holders by its own pids (a live holder there is "dead" here when no such pid runs
// here). Set to something each clone has of its own (its instance id), for the effectfence
// processes started on that clone; a process captured in the snapshot keeps its owner string
// on every clone, which no variable can mend.
const MachineIDEnv = "EFFECTFENCE_MACHINE_ID"

// machineBoot is the boot field of this process's owner string: the kernel's boot id, and
// when machineID is set, "+" and the first 16 hex digits of its SHA-256 (an owner string's
// fields are split at "/", and the id is the operator's text). A process with another machine
// id, or none, never judges this one's holders dead (OwnerLiveness), and an older version,
// which compares the field whole, judges them not at all. An unreadable boot id stays ""
// (judged by nobody).
func machineBoot(bootID, machineID string) string {
	if bootID == "" || machineID == "" {
		return bootID
	}
	sum := sha256.Sum256([]byte(machineID))
	return bootID + "+" + hex.EncodeToString(sum[:8])
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's start times: 100 on every Linux
// architecture Go builds for.
const clockTicks = 100

// bootOffset returns the boottime offset of this process's time namespace in clock ticks: what
// the kernel adds to every start time this process reads in /proc/PID/stat. known is false when
// it cannot be stated in whole ticks: the offsets file is unreadable or malformed, the offset
// has a fraction of a tick (start times read here are then rounded apart from the initial
// namespace's by up to one tick), or this process's time namespace is not the one the file
// describes (the file shows the namespace its children get). A kernel without time
// namespaces has no offsets file: offset 0.
func bootOffset() (ticks int64, known bool) {
	b, err := os.ReadFile("/proc/self/timens_offsets")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, true
	}
	if err != nil {
		return 0, false
	}
	if now, err1 := os.Readlink("/proc/self/ns/time"); err1 != nil {
		return 0, false
	} else if kids, err2 := os.Readlink("/proc/self/ns/time_for_children"); err2 != nil || kids != now {
		return 0, false
	}
	return parseBootOffset(string(b))
}

// parseBootOffset reads the boottime line of a timens_offsets file ("boottime <seconds>
// <nanoseconds>"; kernels before names were shown print the clock id, 7) as clock ticks.
func parseBootOffset(text string) (ticks int64, known bool) {
	const tick = int64(1e9 / clockTicks)
	found := false
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return 0, false
		}
		if f[0] != "boottime" && f[0] != "7" {
			continue
		}
		sec, err1 := strconv.ParseInt(f[1], 10, 64)
		nsec, err2 := strconv.ParseInt(f[2], 10, 64)
		// The kernel keeps offsets within KTIME_SEC_MAX (about 9.2e9 s); 2^40 s bounds the ticks
		// far inside int64.
		if err1 != nil || err2 != nil || found || nsec < 0 || nsec >= 1e9 || nsec%tick != 0 ||
			sec > 1<<40 || sec < -(1<<40) {
			return 0, false
		}
		ticks, found = sec*clockTicks+nsec/tick, true
	}
	return ticks, found
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
	base, carrier := splitCarrier(owner)
	parts := strings.Split(base, "/")
	if len(parts) != 5 || !me.sound {
		return CannotTell
	}
	if parts[4] != me.pidns {
		// Another PID namespace: alive if this process sees it running below its own
		// (nested_linux.go), out of sight otherwise.
		if !belowHere(parts, me) {
			return CannotTell
		}
		l := nestedLiveness(parts, me)
		if l != Alive && carrier != "" {
			if _, running := nestedCarrier(parts[4], carrier, me); running {
				// Not found running, but a process of the group it started to run the call
				// runs in its namespace: the call may be running.
				l = Alive
			}
		}
		return l
	}
	// One boot of one kernel, but another machine id, or one process of the two without any
	// (machineBoot): a clone of this machine, or a process here whose environment lacks the id
	// (an operator's shell). Its pid may not be counted here, so it is never judged dead; a
	// process running here at that pid with that start time is alive all the same, which is
	// the safe answer (cannot tell would let a re-run-safe claim be taken over, and an
	// operator clear a claim, while it ran here).
	sameMachine := parts[3] == me.boot
	if !sameMachine && bootOf(parts[3]) != bootOf(me.boot) {
		return CannotTell
	}
	l := pidLiveness(parts, me)
	if l == Dead && carrier != "" {
		// The holder is gone, but the processes it started to run the call may not be.
		l = carriers.liveness(owner, carrier, me)
	}
	if l == Dead && !sameMachine {
		return CannotTell
	}
	return l
}

// CanTellGone reports whether this process may judge the holder named by owner gone (Dead) at
// all: its pid is counted in this process's PID namespace, on this machine and boot. Any other
// holder (in a container on this host, found running or not; on another machine) is never
// judged gone, so its claim, once nothing of it is seen running, holds until its lease lapses.
func CanTellGone(owner string) bool {
	me := whereAmI()
	base, _ := splitCarrier(owner)
	parts := strings.Split(base, "/")
	return len(parts) == 5 && me.sound && parts[4] == me.pidns && parts[3] == me.boot
}

// belowHere: the owner split in parts names a process of this boot in another PID namespace
// than this process's, which it may see below its own (nested_linux.go), its /proc sound.
func belowHere(parts []string, me local) bool {
	return me.sound && parts[4] != me.pidns && bootOf(parts[3]) == bootOf(me.boot)
}

// bootOf is the kernel's boot id in an owner's boot field (machineBoot).
func bootOf(field string) string {
	id, _, _ := strings.Cut(field, "+")
	return id
}

// pidLiveness judges the pid and start time of an owner string split in parts (five fields,
// counted in this process's PID namespace of this boot) by this process's /proc.
func pidLiveness(parts []string, me local) Liveness {
	pid, err1 := strconv.Atoi(parts[1])
	start, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 || start == 0 {
		return CannotTell
	}
	now, state := procStat(pid)
	if now != 0 {
		n := int64(now) - me.offset // in the initial time namespace's ticks, as start is
		if n <= 0 {
			return CannotTell
		}
		now = uint64(n)
	}
	switch {
	case state == 0 && processGone(pid):
		return Dead
	case state == 0:
		return CannotTell
	case now != start:
		return Dead // the pid was reused
	}
	switch running, unseen := runs(pid, state); {
	case unseen:
		return CannotTell
	case !running:
		return Dead // a zombie has stopped running; only its exit status waits to be reaped
	}
	return Alive
}

// threads is the Threads count of /proc/PID/status, 0 when it cannot be read; unseen is set
// when that is for a reason other than the process being gone (no descriptor left to read
// it, say): its count is then unknown, and a process read as a zombie may still run. The
// state in /proc/PID/stat is the main thread's: a process whose main thread exited while
// others run reads Z as a zombie does, but a zombie has no thread left but its leader.
func threads(pid int) (n int, unseen bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n, false
		}
	}
	return 0, false
}

// runs says whether a process whose /proc/PID/stat reads state runs: any state but a
// zombie's or a dead one's, or such a state with threads left (see threads). unseen: its
// threads could not be counted, so it cannot be told. Before 2026-12-06 a count that could
// not be read was 0, and a process whose stat a judge read just before its descriptors ran
// out was judged ended while its threads ran.
func runs(pid int, state byte) (yes, unseen bool) {
	if state != 'Z' && state != 'X' {
		return true, false
	}
	n, unseen := threads(pid)
	return n > 1, unseen
}

// OwnerDead reports whether OwnerLiveness is Dead.
func OwnerDead(owner string) bool { return OwnerLiveness(owner) == Dead }

// procStat reads the start time (field 22) and state (field 3) of /proc/PID/stat; state is 0
// when the file cannot be read.
func procStat(pid int) (start uint64, state byte) {
	start, state, _ = procStatGroup(pid)
	return start, state
}

// procStatGroup is procStat with the process group (field 5), 0 when unread.
func procStatGroup(pid int) (start uint64, state byte, pgrp int) {
	start, state, pgrp, _ = procStatSeen(pid)
	return start, state, pgrp
}

// procStatSeen is procStatGroup, with unseen true when /proc/PID/stat could not be read for a
// reason other than no process having pid (a judge out of file descriptors or memory): that
// process was not seen, neither running nor gone.
func procStatSeen(pid int) (start uint64, state byte, pgrp int, unseen bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		// No such file (no such pid), or ESRCH (it exited between open and read): gone.
		return 0, 0, 0, !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH)
	}
	// The command name (field 2) may contain spaces and parentheses: fields resume after the
	// last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	fields := strings.Fields(s[i+1:])
	// fields[0] is field 3 (state), so starttime (field 22) is fields[19].
	if len(fields) < 20 || fields[0] == "" {
		return 0, 0, 0, false
	}
	n, _ := strconv.ParseUint(fields[19], 10, 64)
	g, _ := strconv.Atoi(fields[2]) // field 5
	return n, fields[0][0], g, false
}
