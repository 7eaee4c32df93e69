package fence

import (
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Carriers: the processes a holder started to run its call.
//
// A holder is not always the process that runs the effect. wrap forwards a call to its MCP
// server, a child in a process group of its own, and that server may run the call in a process
// of its own (the `node` that `npx` starts, a worker, a shell's command). Killed with SIGKILL,
// wrap takes its direct child with it (the parent-death signal) but not a grandchild, which
// reads end-of-file on its stdin and, like most servers, finishes the calls it has before it
// exits: the effect can still happen after its holder is gone, even after the claim's lease
// lapsed. Judged by the holder's pid alone, such a claim was taken over at once when re-run
// safe (a second execution while the first ran) and, once its lease lapsed, cleared or resolved
// as not having happened by an operator while the effect was still under way.
//
// So a claim may name a carrier: the process group its call was sent to, as "g<pgid>.<start>"
// (start: its leader's start time, in the initial time namespace's clock ticks, as an owner's
// is). It is recorded in the host field of the claim's owner string, after a "+"
// (host+g<pgid>.<start>/pid/start/boot/pidns; Request.Carrier), and a holder that is gone is
// judged alive while its carrier has a running member. The host field is the one older
// versions do not judge by: they read such an owner exactly as they read it without the
// carrier (a sixth field would have made them judge every such holder "cannot tell", a live
// stalled one too, whose claim they would then take over or clear once its lease lapsed).
// This process's own host name never holds a "+" (whereAmI writes "_"); a text after the
// last "+" that is not a carrier is part of the host name.
//
// The group's number stays taken while the group has a member (Linux frees a pid only once no
// process uses it as its pid, group or session), so a group that is seen empty is gone for
// good; a number that another process has taken since (a live process at pgid started at
// another time) means the same. A process that leaves the group (setsid, setpgid: a daemon)
// is not followed.

// GroupCarrier returns the carrier naming process group pgid, whose leader (the process pgid)
// must be running, or "" when this process cannot name it soundly: no /proc, a /proc of
// another PID namespace, a pgid that is not its leader's group.
func GroupCarrier(pgid int) string {
	me := whereAmI()
	if pgid <= 0 || !me.sound {
		return ""
	}
	start, state, group := procStatGroup(pgid)
	n := int64(start) - me.offset
	if start == 0 || n <= 0 || group != pgid || state == 'X' {
		return ""
	}
	return "g" + strconv.Itoa(pgid) + "." + strconv.FormatInt(n, 10)
}

// Held is carrier c (GroupCarrier's) marked as running a call its holder no longer follows:
// a task its server runs on its own, which wrap stops following (its wait over, the server
// forgetting it, an answer wrap cannot read) while the server still runs. A claim whose
// carrier is held is held while a process of the group runs, its leader included, whether or
// not the holder runs (CarrierRuns): an unknown outcome recorded by a live wrap while its live
// server might still finish the task is not cleared until that server has stopped. Written
// "h<pgid>.<start>"; "" when c is no carrier.
func Held(c string) string {
	if _, _, ok := parseCarrier(c); !ok {
		return ""
	}
	return "h" + c[1:]
}

// isHeld says whether carrier c is Held's.
func isHeld(c string) bool { return strings.HasPrefix(c, "h") }

// parseCarrier reads "g<pgid>.<start>", or Held's "h<pgid>.<start>".
func parseCarrier(c string) (pgid int, start uint64, ok bool) {
	rest, found := strings.CutPrefix(c, "g")
	if !found {
		rest, found = strings.CutPrefix(c, "h")
	}
	if !found {
		return 0, 0, false
	}
	g, s, found := strings.Cut(rest, ".")
	if !found || !digits(g) || !digits(s) {
		return 0, 0, false
	}
	pgid, err1 := strconv.Atoi(g)
	start, err2 := strconv.ParseUint(s, 10, 64)
	// Group 1 is never a child's (kill(-1, 0) would probe every process besides). No pid
	// exceeds PID_MAX_LIMIT (2^22), and kill takes a 32-bit pid: a larger number would be cut
	// to another group's, or to -1 (every process) or 0 (this process's own group).
	if err1 != nil || err2 != nil || pgid <= 1 || pgid > maxPid || start == 0 {
		return 0, 0, false
	}
	return pgid, start, true
}

// maxPid is Linux's PID_MAX_LIMIT, the largest pid_max can be set to.
const maxPid = 1 << 22

func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// validCarrier says whether c may be given as Request.Carrier: empty, or a carrier
// GroupCarrier (or Held) could have made.
func validCarrier(c string) bool {
	if c == "" {
		return true
	}
	_, _, ok := parseCarrier(c)
	return ok
}

// carrierCache remembers the carriers seen gone: a group seen empty never comes back (its
// number was free to be taken by another group), so a later look could only be misled. And
// for a moment the carriers seen running: finding a member without its leader reads all of
// /proc (BenchmarkGoneHolderWithRunningCarrier: 3 to 9 ms for 150 processes on a 2-core
// machine), in the ledger's transaction, for every attempt at the claim; a group that ends is
// then seen ended up to aliveFor later, which only holds its claim that much longer.
type carrierCache struct {
	mu    sync.Mutex
	gone  map[string]struct{}
	alive map[string]time.Time // until when a carrier seen running is taken as running
}

var carriers carrierCache

// maxGoneCarriers bounds each map of the cache; past it, that map starts over.
const maxGoneCarriers = 4096

// aliveFor is how long a carrier seen running is taken as running without a look.
const aliveFor = time.Second

// liveness judges the carrier c of owner (whose holder process is gone): Alive while its group
// has a member that runs (the leader, stopped or not, or any other), Dead once it has none.
func (cc *carrierCache) liveness(owner, c string, me local) Liveness {
	now := time.Now()
	cc.mu.Lock()
	_, gone := cc.gone[owner]
	until, seen := cc.alive[owner]
	cc.mu.Unlock()
	switch {
	case gone:
		return Dead
	case seen && now.Before(until):
		return Alive
	}
	pgid, start, ok := parseCarrier(c)
	if !ok {
		return CannotTell // not a carrier this version reads: judged by its lease
	}
	l := groupLiveness(pgid, start, me)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	switch l {
	case Dead:
		if cc.gone == nil || len(cc.gone) >= maxGoneCarriers {
			cc.gone = map[string]struct{}{}
		}
		cc.gone[owner] = struct{}{}
		delete(cc.alive, owner)
	case Alive:
		if cc.alive == nil || len(cc.alive) >= maxGoneCarriers {
			cc.alive = map[string]time.Time{}
		}
		cc.alive[owner] = now.Add(aliveFor)
	}
	return l
}

// groupLiveness judges process group pgid whose leader started at start.
func groupLiveness(pgid int, start uint64, me local) Liveness {
	empty, foreign := groupProbe(pgid)
	if empty {
		return Dead // the kernel's own answer: no process has this group
	}
	switch leaderOf(pgid, start, me) {
	case leaderUnknown:
		return CannotTell
	case leaderReplaced:
		return Dead
	case leaderRuns:
		return Alive
	}
	return membersRun(pgid, foreign)
}

// leaderState is what /proc shows of a group's leader.
type leaderState int

const (
	leaderGone     leaderState = iota // no process at its pid, or a zombie
	leaderRuns                        // it runs, or is stopped
	leaderReplaced                    // its pid is a process started at another time: the group had emptied, its number free
	leaderUnknown                     // a start this process cannot count in the initial namespace's ticks
)

// leaderOf tells of process group pgid's leader, which started at start.
func leaderOf(pgid int, start uint64, me local) leaderState {
	now, state, _, unseen := procStatSeen(pgid)
	switch {
	case unseen:
		return leaderUnknown
	case now == 0:
		return leaderGone
	}
	n := int64(now) - me.offset
	switch {
	case n <= 0:
		return leaderUnknown
	case uint64(n) != start:
		return leaderReplaced
	}
	switch running, unseen := runs(pgid, state); {
	case unseen:
		return leaderUnknown
	case running:
		return leaderRuns
	}
	return leaderGone
}

// membersRun judges a group with members (groupProbe) whose leader is gone: alive while a
// member other than a zombie runs. foreign is groupProbe's: members this process may not
// signal, which /proc may hide from it (hidepid), so seeing none it cannot tell.
//
// A look at /proc lists pids before it reads each one's stat, so a member born after the
// listing passed its pid is not seen: a member that forks and exits between the two, its
// child born where the listing had been, slips past any number of looks (a chain of such
// members, each starting the next and exiting, was judged ended, for good, while it ran).
// What a look cannot miss is a member that lived through it, so Dead is said only once no
// member was born unseen. Pids are handed out in turn (the kernel's cursor, the last pid of
// /proc/loadavg, wraps at pid_max), so the pids born during a look are those between the
// cursor before it and after it: read directly, in the order they were handed out, and again
// for those born meanwhile, until a round in which none was. A member in the middle of being
// born (its pid handed out, not yet in /proc) has a parent that runs through it, read live
// by an earlier round or by one of the two whole looks. Not followed: a process that joins
// the group from outside (setpgid), or a pid placed by a privileged process (clone3's set_tid,
// a write to ns_last_pid).
func membersRun(pgid int, foreign bool) Liveness {
	began := time.Now()
	last, ok := lastPid()
	if !ok {
		return CannotTell
	}
	// Two whole looks: a member whose birth was under way before the first (its pid handed out
	// before the cursor was read) has a parent that lives through the first, or it lives
	// through the second.
	for range 2 {
		if l := groupMemberRuns(pgid); l != Dead {
			return l
		}
	}
	for round := 0; ; round++ {
		now, ok := lastPid()
		switch {
		case !ok:
			return CannotTell
		case time.Since(began) > bornWithin:
			return Alive // a look so slow the cursor may have gone round: not seen to end
		case now == last && foreign:
			return CannotTell
		case now == last:
			return Dead
		case round == maxBornRounds:
			return Alive // births that do not stop: not seen to end
		}
		if l := bornRun(pgid, last, now); l != Dead {
			return l
		}
		last = now
	}
}

// maxBornRounds bounds the rounds of membersRun that read the pids born during the last.
const maxBornRounds = 1000

// bornWithin bounds a judgement of membersRun: the kernel hands out fewer pids than a
// pid_max in that time, so a cursor read twice tells the pids handed out between.
const bornWithin = 2 * time.Second

// maxBorn bounds the pids one round of membersRun reads.
const maxBorn = 1 << 16

// bornRun reads the pids the kernel handed out after from up to to (the cursor wrapping at
// pid_max), in that order: Alive when one is a running member of group pgid.
func bornRun(pgid, from, to int) Liveness {
	top := pidMax()
	if from < 0 || to < 0 || from >= top || to >= top {
		return Alive // a cursor this process cannot place
	}
	n := to - from
	if n < 0 {
		n += top
	}
	if n > maxBorn {
		return Alive
	}
	for pid := from + 1; n > 0; n-- {
		if pid >= top {
			pid = 1
		}
		_, state, group, unseen := procStatSeen(pid)
		if unseen {
			return CannotTell // not seen: it may be a running member
		}
		if group == pgid && state != 0 {
			switch running, unseen := runs(pid, state); {
			case unseen:
				return CannotTell
			case running:
				return Alive
			}
		}
		pid++
	}
	return Dead
}

// lastPid is the pid the kernel last handed out in this process's PID namespace (the last
// field of /proc/loadavg).
func lastPid() (int, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 5 {
		return 0, false
	}
	n, err := strconv.Atoi(f[4])
	return n, err == nil && n >= 0
}

// pidMax is the kernel's pid_max: pids wrap to the lowest free one past it.
func pidMax() int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return maxPid
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 1 || n > maxPid {
		return maxPid
	}
	return n
}

// groupMemberRuns reads /proc for a process of group pgid that is not a zombie.
func groupMemberRuns(pgid int) Liveness {
	d, err := os.Open("/proc")
	if err != nil {
		return CannotTell
	}
	defer d.Close()
	for {
		names, err := d.Readdirnames(512)
		for _, name := range names {
			if name[0] < '1' || name[0] > '9' {
				continue
			}
			pid, err := strconv.Atoi(name)
			if err != nil {
				continue
			}
			_, state, group, unseen := procStatSeen(pid)
			if unseen {
				// Not seen (no descriptor left to read it, say): it may be a running member,
				// and a group taken for ended is ended for good (carrierCache).
				return CannotTell
			}
			if group == pgid && state != 0 {
				switch running, unseen := runs(pid, state); {
				case unseen:
					return CannotTell
				case running:
					return Alive
				}
			}
		}
		if err == io.EOF {
			return Dead
		}
		if err != nil {
			return CannotTell
		}
	}
}

// withCarrier is owner with carrier added to its host field.
func withCarrier(owner, carrier string) string {
	if carrier == "" {
		return owner
	}
	host, rest, found := strings.Cut(owner, "/")
	if !found {
		return owner + "+" + carrier
	}
	return host + "+" + carrier + "/" + rest
}

// splitCarrier returns owner without its carrier, and the carrier ("" for none).
func splitCarrier(owner string) (base, carrier string) {
	host, _, _ := strings.Cut(owner, "/")
	i := strings.LastIndexByte(host, '+')
	if i < 0 {
		return owner, ""
	}
	if _, _, ok := parseCarrier(host[i+1:]); !ok {
		return owner, "" // part of a host name
	}
	return owner[:i] + owner[len(host):], host[i+1:]
}

// ownerWith is the owner string of a claim this engine makes or renews with carrier.
func (e *Engine) ownerWith(carrier string) string {
	if carrier == "" {
		return e.cfg.Owner
	}
	if p := e.carried.Load(); p != nil && p[0] == carrier {
		return p[1]
	}
	o := withCarrier(e.cfg.Owner, carrier)
	e.carried.Store(&[2]string{carrier, o})
	return o
}

// mine reports whether owner is this engine's process, with a carrier or without.
func (e *Engine) mine(owner string) bool {
	if owner == e.cfg.Owner {
		return true
	}
	base, c := splitCarrier(owner)
	return c != "" && base == e.cfg.Owner
}

// CarrierRuns reports whether owner names a carrier that may still be running a call nobody
// follows any more, and its group: a member of the group runs while the holder process is gone
// (wrap killed; the node under npx finishes the call), or while the group's own leader is (the
// server exited mid-call, leaving a process it started to finish it: its claim was fenced as
// unknown, and no late result will come). That is what an operator must stop, or wait for,
// before the claim is freed. A group whose leader and holder both run is not a carrier left
// behind: the server is alive and answers for its calls; unless the carrier is Held (a task
// the holder stopped following), when any process of the group running is. Judged by this
// process's /proc.
func CarrierRuns(owner string) (pgid int, runs bool) {
	pgid, _, runs = carrierState(owner)
	return pgid, runs
}

// GoneHolderCarrier reports whether owner's holder process is gone while the process group it
// started to run the call (its carrier) still runs, and that group: the claim is held, but no
// outcome will be recorded by its holder (a wrap killed while its server runs the call).
func GoneHolderCarrier(owner string) (pgid int, ok bool) {
	pgid, gone, runs := carrierState(owner)
	return pgid, gone && runs
}

// carrierState is CarrierRuns, saying too whether the holder process is gone.
func carrierState(owner string) (pgid int, holderGone, runs bool) {
	base, c := splitCarrier(owner)
	parts := strings.Split(base, "/")
	if c == "" || len(parts) != 5 {
		return 0, false, false
	}
	pgid, start, _ := parseCarrier(c)
	me := whereAmI()
	if belowHere(parts, me) {
		// A holder in a container on this host (nested_linux.go): found running, it answers
		// for its calls; not found while a process of its group runs in its namespace, which
		// this process sees, it is gone and the group is what must be stopped, named by its
		// number here.
		if _, found := nestedFind(parts, me); found {
			return 0, false, false
		}
		g, running := nestedCarrier(parts[4], c, me)
		return g, running, running
	}
	if !me.sound || parts[4] != me.pidns || bootOf(parts[3]) != bootOf(me.boot) {
		return 0, false, false
	}
	if pidLiveness(parts, me) == Dead {
		return pgid, true, OwnerLiveness(owner) == Alive
	}
	if isHeld(c) {
		// The holder runs, and so may the server that runs a task it no longer follows.
		return pgid, false, groupLiveness(pgid, start, me) == Alive
	}
	// The holder runs (or cannot be told): a group whose leader is gone but whose member runs.
	if leaderOf(pgid, start, me) != leaderGone {
		return 0, false, false // its leader runs (the live server), or the group ended
	}
	empty, foreign := groupProbe(pgid)
	if empty {
		return 0, false, false
	}
	return pgid, false, membersRun(pgid, foreign) == Alive
}

// carrierOf is owner's carrier ("" for none).
func carrierOf(owner string) string {
	_, c := splitCarrier(owner)
	return c
}

// holderWords names the holder of a claim for a message: its process, and the group it
// started when that runs on without the holder or without its own leader (CarrierRuns).
func holderWords(owner string) string {
	g, gone, runs := carrierState(owner)
	switch {
	case runs && gone:
		return "process " + owner + ", gone, but process group " + strconv.Itoa(g) + " it started to run the call still runs (`kill -KILL -- -" + strconv.Itoa(g) + "` stops it)"
	case runs && isHeld(carrierOf(owner)):
		return "process " + owner + ", whose server, process group " + strconv.Itoa(g) + ", still runs and may still run the task the holder stopped following (`kill -KILL -- -" + strconv.Itoa(g) + "` stops it)"
	case runs:
		return "process " + owner + ", whose process group " + strconv.Itoa(g) + " started to run the call lost its leader but still runs (`kill -KILL -- -" + strconv.Itoa(g) + "` stops it)"
	}
	return "process " + owner
}
