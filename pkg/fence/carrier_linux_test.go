package fence

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startGroup starts a shell leading a process group of its own that starts a member (sleep)
// in it, and returns the shell, the member's pid and the writer whose close ends the shell:
// the member then runs on in the group without its leader, as the node under a killed wrap's
// npx does.
func startGroup(t testing.TB) (leader *exec.Cmd, member int, end io.Closer) {
	t.Helper()
	leader = exec.Command("sh", "-c", "sleep 60 & echo $!; read x")
	leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := leader.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := leader.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Start(); err != nil {
		t.Skipf("skipped: no sh: %v", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	member, _ = strconv.Atoi(strings.TrimSpace(line))
	if err != nil || member <= 0 {
		t.Fatalf("the group's member: %q, %v", line, err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-leader.Process.Pid, syscall.SIGKILL)
		_ = in.Close()
		_ = leader.Wait()
	})
	return leader, member, in
}

// goneHolder returns the owner string of a process that ran and is gone (killed and reaped).
func goneHolder(t testing.TB, me local) string {
	t.Helper()
	h := exec.Command("sleep", "60")
	if err := h.Start(); err != nil {
		t.Skipf("skipped: no sleep: %v", err)
	}
	start, _ := procStat(h.Process.Pid)
	owner := fmt.Sprintf("h/%d/%d/%s/%s", h.Process.Pid, int64(start)-me.offset, me.boot, me.pidns)
	_ = h.Process.Kill()
	_ = h.Wait()
	if got := OwnerLiveness(owner); got != Dead {
		t.Fatalf("a killed and reaped holder: %s, want dead", got)
	}
	return owner
}

// TestCarrierKeepsAGoneHolderAlive: a holder that is gone is alive while the process group it
// named as its carrier has a member that runs (stopped or not), with or without the group's
// leader, and dead once the group has none; a carrier whose leader's pid now belongs to a
// process started at another time names a group that is gone. Real processes throughout.
func TestCarrierKeepsAGoneHolderAlive(t *testing.T) {
	t.Parallel()
	me := whereAmI()
	if !me.sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	holder := goneHolder(t, me)
	leader, member, end := startGroup(t)
	pgid := leader.Process.Pid
	carrier := GroupCarrier(pgid)
	if want := fmt.Sprintf("g%d.", pgid); !strings.HasPrefix(carrier, want) {
		t.Fatalf("GroupCarrier(%d) = %q, want %s<start>", pgid, carrier, want)
	}
	if c := GroupCarrier(member); c != "" {
		t.Fatalf("GroupCarrier of a member that does not lead its group: %q, want none", c)
	}
	owner := withCarrier(holder, carrier)
	if got := OwnerLiveness(owner); got != Alive {
		t.Fatalf("a gone holder whose carrier's leader runs: %s, want alive", got)
	}
	// A live holder (this process) whose carrier's leader runs: a server that answers for its
	// calls, not a carrier left behind.
	mine := withCarrier(me.owner, carrier)
	if _, runs := CarrierRuns(mine); runs {
		t.Fatal("CarrierRuns of a live holder whose carrier's leader runs")
	}
	pg, _, _ := strings.Cut(carrier, ".")
	start, _ := strconv.ParseUint(carrier[len(pg)+1:], 10, 64)
	for _, c := range []struct {
		carrier string
		want    Liveness
	}{
		{fmt.Sprintf("%s.%d", pg, start+1), Dead}, // its number taken by a process started at another time
		// Not carriers: part of the host name, so the holder alone is judged (gone).
		{"x" + carrier[1:], Dead},
		{"g." + carrier[len(pg)+1:], Dead},
		{fmt.Sprintf("g1.%d", start), Dead},
		{pg, Dead},
		{"", Dead},
	} {
		if got := OwnerLiveness(withCarrier(holder, c.carrier)); got != c.want {
			t.Errorf("carrier %q: %s, want %s", c.carrier, got, c.want)
		}
	}
	// The carrier rides in the host field, which versions before it do not judge by: they
	// split the owner into the five fields they know, pid to namespace as without it.
	if f, h := strings.Split(owner, "/"), strings.Split(holder, "/"); len(f) != 5 || !slices.Equal(f[1:], h[1:]) || f[0] != h[0]+"+"+carrier {
		t.Fatalf("the owner with its carrier %q, the holder's %q", owner, holder)
	}
	if base, c := splitCarrier("my+host/1/2/3/4"); base != "my+host/1/2/3/4" || c != "" {
		t.Fatalf("a host name with a + is not a carrier: %q %q", base, c)
	}

	// The leader ends; its member runs on, then is stopped: alive both ways.
	_ = end.Close()
	_ = leader.Wait()
	if got := OwnerLiveness(owner); got != Alive {
		t.Fatalf("a gone holder whose carrier's leader is gone, a member running: %s, want alive", got)
	}
	if g, runs := CarrierRuns(owner); !runs || g != pgid {
		t.Fatalf("CarrierRuns = %d, %v; want %d, true", g, runs, pgid)
	}
	if w := holderWords(owner); !strings.Contains(w, fmt.Sprintf("kill -KILL -- -%d", pgid)) || !strings.Contains(w, "gone") {
		t.Fatalf("the holder's words name no group to stop: %s", w)
	}
	// The live holder's carrier lost its leader while a member runs: left behind.
	if g, runs := CarrierRuns(mine); !runs || g != pgid {
		t.Fatalf("CarrierRuns of a live holder whose carrier lost its leader = %d, %v; want %d, true", g, runs, pgid)
	}
	if w := holderWords(mine); !strings.Contains(w, "lost its leader") {
		t.Fatalf("the live holder's words: %s", w)
	}
	if err := syscall.Kill(member, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitProcState(t, member, 'T')
	if got := OwnerLiveness(owner); got != Alive {
		t.Fatalf("its member stopped: %s, want alive", got)
	}
	if err := syscall.Kill(member, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return OwnerLiveness(owner) == Dead })
	if _, runs := CarrierRuns(owner); runs {
		t.Fatal("CarrierRuns after the group ended")
	}
	if _, runs := CarrierRuns(mine); runs {
		t.Fatal("CarrierRuns of the live holder after the group ended")
	}
	// Without its carrier, or once its carrier is seen gone, the holder is dead for good.
	if got := OwnerLiveness(holder); got != Dead {
		t.Fatalf("the holder alone: %s, want dead", got)
	}
}

// TestCarrierOnTheClaim: Request.Carrier is recorded in the claim's owner string; a heartbeat
// of the holder keeps it, Carry replaces it, a heartbeat of another process (a ticket handed
// over) drops it; a malformed one is refused. And an engine judging a claim of a gone holder
// whose carrier runs neither takes it over (re-run safe) nor lets an operator clear it, then
// does once the group has ended.
func TestCarrierOnTheClaim(t *testing.T) {
	t.Parallel()
	me := whereAmI()
	if !me.sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	ctx := context.Background()
	store := NewMemoryStore()
	holder := goneHolder(t, me)
	gone := New(store, Config{Owner: holder, LeaseTTL: time.Hour})
	leader, member, _ := startGroup(t)
	carrier := GroupCarrier(leader.Process.Pid)

	if _, err := gone.Prepare(ctx, Request{Intent: "bad", Tool: "t", Carrier: "g1"}); !errors.As(err, new(InvalidError)) {
		t.Fatalf("a malformed carrier: %v, want InvalidError", err)
	}
	adm, err := gone.Prepare(ctx, Request{Intent: "pay", Tool: "t", RerunSafe: true, Carrier: carrier})
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	owner := func() string {
		s, err := gone.Status(ctx, "pay")
		if err != nil {
			t.Fatal(err)
		}
		return s.Owner
	}
	if o := owner(); o != withCarrier(holder, carrier) {
		t.Fatalf("the claim's owner: %q, want %q", o, withCarrier(holder, carrier))
	}
	tk, err := gone.Heartbeat(ctx, *adm.Ticket)
	if err != nil || owner() != withCarrier(holder, carrier) {
		t.Fatalf("after its holder's heartbeat: %q %v, want the carrier kept", owner(), err)
	}
	if _, err := gone.Carry(ctx, tk, "nope"); !errors.As(err, new(InvalidError)) {
		t.Fatalf("Carry of a malformed carrier: %v", err)
	}
	if tk, err = gone.Carry(ctx, tk, ""); err != nil || owner() != holder {
		t.Fatalf("Carry with none: %q %v", owner(), err)
	}
	if tk, err = gone.Carry(ctx, tk, carrier); err != nil || owner() != withCarrier(holder, carrier) {
		t.Fatalf("Carry: %q %v", owner(), err)
	}

	judge := New(store, Config{LeaseTTL: time.Hour})
	if _, err := judge.Prepare(ctx, Request{Intent: "pay", Tool: "t", RerunSafe: true}); !errors.As(err, new(InFlightError)) {
		t.Fatalf("a re-run-safe claim of a gone holder whose carrier runs: %v, want in flight (not taken over)", err)
	}
	if _, err := judge.ClearUnlessHeld(ctx, "pay", "op", "checked"); !errors.As(err, new(NotFencedError)) {
		t.Fatalf("an operator's clear while the carrier runs: %v, want refused", err)
	}
	_ = syscall.Kill(member, syscall.SIGKILL)
	_ = syscall.Kill(-leader.Process.Pid, syscall.SIGKILL)
	_ = leader.Wait()
	waitFor(t, func() bool { return OwnerLiveness(withCarrier(holder, carrier)) == Dead })
	adm, err = judge.Prepare(ctx, Request{Intent: "pay", Tool: "t", RerunSafe: true})
	if err != nil || !adm.Fresh() || !adm.Ticket.Reclaimed {
		t.Fatalf("once the carrier ended, the re-run-safe claim is taken over: %+v %v", adm, err)
	}
	if o := owner(); o != judge.Config().Owner {
		t.Fatalf("the new claim's owner: %q, want the judge's %q", o, judge.Config().Owner)
	}
	if _, err := gone.Heartbeat(ctx, tk); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the old holder's heartbeat after the takeover: %v", err)
	}
	// A ticket heartbeated by another process than its claim's holder: held through that one.
	if _, err := gone.Heartbeat(ctx, *adm.Ticket); err != nil || owner() != holder {
		t.Fatalf("a handed-over ticket's heartbeat: %q %v, want the heartbeating process without a carrier", owner(), err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// BenchmarkGoneHolderWithRunningCarrier: what judging a gone holder's carrier costs, uncached,
// while it runs without its leader: the case that reads all of /proc (the machine's process
// count is reported as procs).
func BenchmarkGoneHolderWithRunningCarrier(b *testing.B) {
	me := whereAmI()
	if !me.sound {
		b.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	leader, _, end := startGroup(b)
	pgid, start, _ := parseCarrier(GroupCarrier(leader.Process.Pid))
	_ = end.Close()
	_ = leader.Wait()
	ents, _ := os.ReadDir("/proc")
	for b.Loop() {
		if groupLiveness(pgid, start, me) != Alive { // uncached (carrierCache)
			b.Fatal("not alive")
		}
	}
	b.ReportMetric(float64(len(ents)), "procs")
}

// TestHeldCarrierHoldsWhileItsServerRuns: an unknown claim whose holder and server (the
// carrier's leader) both run is cleared as answered for by the live server, unless its carrier
// is Held (a task the holder stopped following, which the server may still finish): then an
// operator's clear is refused while any process of the group runs, the leader included, and
// goes through once the group has ended. Real processes.
func TestHeldCarrierHoldsWhileItsServerRuns(t *testing.T) {
	t.Parallel()
	me := whereAmI()
	if !me.sound {
		t.Skip("skipped: this process's /proc is not its own PID namespace's")
	}
	ctx := context.Background()
	store := NewMemoryStore()
	e := New(store, Config{LeaseTTL: time.Hour}) // held by this process, which runs
	server := exec.Command("sleep", "60")
	server.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := server.Start(); err != nil {
		t.Skipf("skipped: no sleep: %v", err)
	}
	t.Cleanup(func() { _ = server.Process.Kill(); _ = server.Wait() })
	carrier := GroupCarrier(server.Process.Pid)
	if carrier == "" || Held("nope") != "" || Held(carrier) == "" || !validCarrier(Held(carrier)) {
		t.Fatalf("carrier %q, held %q", carrier, Held(carrier))
	}
	unknown := func(intent string, held bool) {
		t.Helper()
		adm, err := e.Prepare(ctx, Request{Intent: intent, Tool: "t", Carrier: carrier})
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare %s: %+v %v", intent, adm, err)
		}
		tk := *adm.Ticket
		if held {
			if tk, err = e.Carry(ctx, tk, Held(carrier)); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Lost(ctx, tk, "the task's outcome could not be learned"); err != nil {
			t.Fatal(err)
		}
	}
	unknown("call", false)
	unknown("task", true)
	if _, err := e.ClearUnlessHeld(ctx, "call", "op", "checked"); err != nil {
		t.Fatalf("an unknown call whose holder and server run: %v, want cleared (the server answered for it)", err)
	}
	if g, runs := CarrierRuns(must(e.Status(ctx, "task")).Owner); !runs || g != server.Process.Pid {
		t.Fatalf("CarrierRuns of the held task: %d %v", g, runs)
	}
	_, err := e.ClearUnlessHeld(ctx, "task", "op", "checked")
	if !errors.As(err, new(NotFencedError)) || !strings.Contains(err.Error(), "task the holder stopped following") {
		t.Fatalf("a clear of the task while its server runs: %v, want refused, naming the server", err)
	}
	_ = server.Process.Kill()
	_ = server.Wait()
	waitFor(t, func() bool { _, runs := CarrierRuns(must(e.Status(ctx, "task")).Owner); return !runs })
	if _, err := e.ClearUnlessHeld(ctx, "task", "op", "checked"); err != nil {
		t.Fatalf("a clear of the task once its server ended: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
