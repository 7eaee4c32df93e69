package fence

import (
	"errors"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A holder in another PID namespace of this boot (a container on this host, unshare -p) has a
// pid that means nothing in the judge's namespace. But when that namespace lies below the
// judge's (the judge on the host, the holder in a container it started), the judge's /proc
// shows the holder's process under a pid of the judge's own: its /proc/PID/ns/pid names the
// holder's namespace, and the last field of NSpid in /proc/PID/status is the pid the holder
// recorded. Found there with the recorded start time and running, the holder is Alive, as
// surely as a holder of the judge's own namespace. Not found proves nothing: the namespace may
// be a sibling or a parent of the judge's, invisible from here, or the judge may not be
// allowed to read the process's namespace (another user's, without the privilege to trace
// it; /proc mounted with hidepid). So this search only ever turns "cannot tell" into "alive",
// the conservative direction: a running container's claim is then neither taken over nor
// cleared without --force by a process that sees it. Before 2026-12-07 every holder of
// another namespace was "cannot tell", and a lapsed re-run-safe claim of a serve or wrap
// stopped in a container was taken over by a process on the host that could see it running.

// nestedScanAge bounds how long one reading of /proc for a namespace is kept. A holder found in
// it is checked afresh at each use (its start time and state), so a kept reading never makes a
// gone holder alive; and a holder not in it is looked for again unless it started before the
// reading began (then it would have been in it, had it been in sight) and the reading read
// every process it listed: a reading never makes a running holder in sight "cannot tell"
// either. A reading that could not (a judge out of file descriptors) answers no miss: before
// 2026-12-07 a holder it missed stayed "cannot tell" for a second after the descriptors were
// back. Namespace inodes are reused once a namespace ends, so a reading of an ended namespace
// may be kept under a new one's inode: its processes then fail the check, and the new one's
// started after the reading.
const nestedScanAge = time.Second

type nestedScan struct {
	at    time.Time
	ticks uint64      // when the reading began, in the initial time namespace's clock ticks
	pids  map[int]int // pid in the namespace -> pid in this process's /proc
	// groups: process group in the namespace -> its members' pids in this process's /proc
	groups map[int][]int
	// partial: a process /proc listed was not read, for a reason other than its being gone or
	// refused to this process (no file descriptor or memory left), and may be missing.
	partial bool
}

// nestedReadings counts the readings of /proc (for tests).
var nestedReadings atomic.Int64

var nestedPIDs struct {
	sync.Mutex
	byNS map[string]nestedScan
}

// nestedLiveness judges an owner string split in parts (five fields, this boot, another PID
// namespace than this process's) by the processes of that namespace this process's /proc
// shows: Alive when its pid there runs with the recorded start time, CannotTell otherwise.
func nestedLiveness(parts []string, me local) Liveness {
	if _, ok := nestedFind(parts, me); ok {
		return Alive
	}
	return CannotTell
}

// PIDHere is the pid under which this process's /proc shows the holder named by owner, running,
// when it runs in a PID namespace below this process's (a container on this host): the pid in
// owner is counted in that namespace and names another process here (pid 1, its init, is this
// host's init). ok is false for any other owner.
func PIDHere(owner string) (pid int, ok bool) {
	me := whereAmI()
	base, _ := splitCarrier(owner)
	parts := strings.Split(base, "/")
	if len(parts) != 5 || !belowHere(parts, me) {
		return 0, false
	}
	return nestedFind(parts, me)
}

// nestedFind is the pid in this process's /proc of the running holder named by parts.
func nestedFind(parts []string, me local) (int, bool) {
	pid, err1 := strconv.Atoi(parts[1])
	start, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 || start == 0 || !digits(parts[4]) {
		return 0, false
	}
	nestedPIDs.Lock()
	defer nestedPIDs.Unlock()
	now := time.Now()
	s, ok := nestedPIDs.byNS[parts[4]]
	if ok && now.Sub(s.at) < nestedScanAge {
		if host, found := s.pids[pid]; found && nestedRuns(host, start, me) {
			return host, true
		}
		// A process is given its start time a moment before /proc lists it (the kernel sets it
		// early in fork): one that started in the last nestedListLag before a reading may be
		// missing from it.
		if start+nestedListLag < s.ticks && !s.partial {
			return 0, false // it would have been found, were it in sight and running
		}
	}
	if now, ok := bootTicks(me); !ok || start > now+1 {
		// No process started after now: an owner string from a clock this one is not (another
		// machine cloned with this boot id that has run longer) or made up, which no reading
		// finds; read again for each judgement, it would cost a reading of /proc each time.
		return 0, false
	}
	s, ok = readNamespace(parts[4], me, now)
	if !ok {
		return 0, false
	}
	if host, found := s.pids[pid]; found && nestedRuns(host, start, me) {
		return host, true
	}
	return 0, false
}

// readNamespace reads /proc for namespace ns (scanNamespace) and keeps the reading, made at
// now, dropping the readings a second old. nestedPIDs is held.
func readNamespace(ns string, me local, now time.Time) (nestedScan, bool) {
	s, ok := scanNamespace(ns, me)
	if !ok {
		return s, false
	}
	if nestedPIDs.byNS == nil {
		nestedPIDs.byNS = map[string]nestedScan{}
	}
	for k, old := range nestedPIDs.byNS {
		if now.Sub(old.at) >= nestedScanAge {
			delete(nestedPIDs.byNS, k)
		}
	}
	s.at = now
	nestedPIDs.byNS[ns] = s
	return s, true
}

// nestedRuns: the process at pid host of this process's /proc was started at start (initial
// time namespace's ticks) and runs.
func nestedRuns(host int, start uint64, me local) bool {
	now, state := procStat(host)
	if now == 0 || int64(now)-me.offset != int64(start) {
		return false // gone, or that pid is now another process's
	}
	running, unseen := runs(host, state)
	return running && !unseen // a zombie, or threads not counted: only alive is told from here
}

// nestedListLag is how long, in clock ticks, a process may have its start time before /proc
// lists it: the fork that makes it may be preempted in between. A second, far more than that.
const nestedListLag = clockTicks

// bootTicks is the time since boot in the initial time namespace's clock ticks, as start times
// are recorded: this process's boottime in whole ticks (rounded down, as /proc/PID/stat's
// start times are), less its time namespace's offset.
func bootTicks(me local) (uint64, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0, false
	}
	ticks := (ts.Sec*1e9+ts.Nsec)/(1e9/clockTicks) - me.offset
	return uint64(ticks), ticks > 0
}

// scanNamespace reads /proc for the processes of PID namespace ns: their pid in it (the last
// field of NSpid) and in this process's /proc. A process whose namespace cannot be read
// (another user's, or gone meanwhile) is left out. ok is false when the clock or /proc cannot
// be read.
func scanNamespace(ns string, me local) (s nestedScan, ok bool) {
	ticks, ok := bootTicks(me)
	if !ok {
		return s, false
	}
	nestedReadings.Add(1)
	d, err := os.Open("/proc")
	if err != nil {
		return s, false
	}
	names, err := d.Readdirnames(-1)
	_ = d.Close()
	if err != nil {
		return s, false
	}
	s = nestedScan{ticks: ticks, pids: map[int]int{}, groups: map[int][]int{}}
	want := "pid:[" + ns + "]"
	for _, name := range names {
		host, err := strconv.Atoi(name)
		if err != nil || host <= 0 {
			continue
		}
		link, err := os.Readlink("/proc/" + name + "/ns/pid")
		if err != nil || link != want {
			s.partial = s.partial || unread(err)
			continue
		}
		inner, group, ok, unseen := innermostIDs(host)
		if ok {
			s.pids[inner] = host
		}
		if ok && group > 0 {
			s.groups[group] = append(s.groups[group], host)
		}
		s.partial = s.partial || unseen
	}
	return s, true
}

// unread: err, from a file of /proc/PID, says neither that the process is gone nor that this
// process may not read it.
func unread(err error) bool {
	return err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ESRCH) &&
		!errors.Is(err, fs.ErrPermission)
}

// innermostIDs are the last fields of NSpid and NSpgid in /proc/PID/status: the process's pid
// and process group in its own PID namespace (pgid 0: a group of another namespace). unseen:
// the file could not be read for a reason unread names.
func innermostIDs(host int) (pid, pgid int, ok, unseen bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(host) + "/status")
	if err != nil {
		return 0, 0, false, unread(err)
	}
	last := func(v string) int {
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0
		}
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil || n <= 0 {
			return 0
		}
		return n
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, found := strings.CutPrefix(line, "NSpid:"); found {
			pid = last(v)
		} else if v, found := strings.CutPrefix(line, "NSpgid:"); found {
			pgid = last(v)
		}
	}
	// A group whose leader is not of the process's namespace (the holder unshare started is
	// in unshare's group) reads 0 there.
	return pid, pgid, pid > 0, false
}

// nestedCarrier finds a running member of carrier c, a process group of PID namespace ns (the
// holder's, below this process's), and returns that group's number in this process's /proc.
// Only a running member tells anything: none found is no answer (see nestedFind).
func nestedCarrier(ns, c string, me local) (int, bool) {
	pgid, _, ok := parseCarrier(c)
	if !ok || !digits(ns) {
		return 0, false
	}
	nestedPIDs.Lock()
	defer nestedPIDs.Unlock()
	now := time.Now()
	s, kept := nestedPIDs.byNS[ns]
	if !kept || now.Sub(s.at) >= nestedScanAge || s.partial {
		var read bool
		if s, read = readNamespace(ns, me, now); !read {
			return 0, false
		}
	}
	// A member is checked afresh: still of that namespace and group, and running. One that
	// joined the group after the reading is not looked for until the reading is a second old.
	want := "pid:[" + ns + "]"
	for _, host := range s.groups[pgid] {
		if link, err := os.Readlink("/proc/" + strconv.Itoa(host) + "/ns/pid"); err != nil || link != want {
			continue
		}
		if _, g, found, _ := innermostIDs(host); !found || g != pgid {
			continue
		}
		_, state, here := procStatGroup(host)
		if running, unseen := runs(host, state); state != 0 && running && !unseen && here > 0 {
			return here, true
		}
	}
	return 0, false
}
