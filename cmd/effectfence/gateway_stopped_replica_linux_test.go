package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/ledgerturn"
)

// docs/gateway.md: a side-effecting call runs at most once per intent "whichever session,
// process or replica" it arrives at; a replica that stops mid-call leaves its claim to the
// lease rules ("Other replicas cannot see a process in another container or host, so its
// claims become unknown once their lease lapses ... unless the tool is --rerun-safe"). The
// adversary is a replica stopped (SIGSTOP) mid-call, past its lease, not killed: two real
// gateways on one SQLite file and scope, the first's call inside the demo server (15 s), the
// first then stopped until its 2 s lease has lapsed, unrenewed; the first runs beside
// the second, or in a PID namespace of its own (a container: the second cannot see whether
// it lives). The duplicate sent to the second replica meanwhile is NOT executed
// (prior_failure: the claim is unknown); the first, resumed, answers its agent with the
// result of the call it ran, and that late result heals the claim (RELIABILITY.md, "When a
// late result heals an unknown claim"): the same call sent to the second replica afterwards
// is given it, replayed. The tool ran once.
func TestStoppedReplicaPastItsLeaseRunsOnce(t *testing.T) {
	t.Parallel()
	t.Run("beside", func(t *testing.T) { t.Parallel(); stoppedReplica(t, false) })
	t.Run("own PID namespace", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("skipped: needs root to create a PID namespace with unshare")
		}
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Skip("skipped: the unshare command is not installed")
		}
		t.Parallel()
		stoppedReplica(t, true)
	})
}

func stoppedReplica(t *testing.T, namespace bool) {
	dir := t.TempDir()
	effects, ledger := filepath.Join(dir, "effects"), filepath.Join(dir, "shared.db")
	args := []string{"--ledger", ledger, "--scope", "shop", "--lease-secs", "2", "--wait", "3s", "--listen", "127.0.0.1:0",
		"--", effectfence(t), "demo-server", "--latency", "15s", "--effects", effects}
	var under []string
	if namespace {
		under = []string{"unshare", "--pid", "--fork", "--kill-child", "--mount-proc"}
	}
	a, b := startGatewayUnder(t, under, args...), startGateway(t, args...)
	pid := a.cmd.Process.Pid
	if namespace {
		pid = forkedChild(t, pid) // the gateway, not unshare
	}
	charge := func(id string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_stopped_replica"}}}`
	}
	first := a.postAsync(a.initialize(t), charge("2"))
	waitInFlight(t, ledger, a)
	// Stopped inside its call, every thread of it, and not inside a transaction of its own
	// (ledgerturn.StopOutsideTurn): the lease the ledger then holds is the last it renewed.
	if _, err := ledgerturn.StopOutsideTurn(pid, ledger); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	waitStoppedLeaseLapsed(t, ledger, a)

	bsid := b.initialize(t)
	var dup string
	select {
	case dup = <-b.postAsync(bsid, charge("3")):
	case <-time.After(2 * time.Minute):
		t.Fatalf("the duplicate on the second replica got no answer\n%s", b.logText())
	}
	if strings.Contains(dup, "ch_demo") || !strings.Contains(dup, "NOT executed") {
		t.Fatalf("the duplicate on the second replica, while the first is stopped past its lease, was answered %s; want a refusal saying it was NOT executed\n%s", dup, b.logText())
	}
	if n := effectsOf(t, effects); n > 1 {
		t.Fatalf("%d executions while the first replica was stopped, want at most its own", n)
	}

	resume()
	var got string
	select {
	case got = <-first:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the stopped replica, resumed, did not answer its call\n%s", a.logText())
	}
	if !strings.Contains(got, "ch_demo") {
		t.Fatalf("the stopped replica, resumed, answered its call %s; want the result of the call it ran (the effect happened)\n%s", got, a.logText())
	}
	// RELIABILITY.md, "When a late result heals an unknown claim": the holder's own commit is
	// recorded, and the duplicate then gets the real answer.
	again := <-b.postAsync(bsid, charge("4"))
	if !strings.Contains(again, "effectfence/replayed") || !strings.Contains(again, chargeID(got)) {
		t.Fatalf("the call sent again to the second replica once the first answered was answered %s; want the first's result (%s) replayed\n%s", again, chargeID(got), b.logText())
	}
	if n := effectsOf(t, effects); n != 1 {
		t.Fatalf("%d executions of one intent across a stopped replica, want 1\nfirst:\n%s\nsecond:\n%s", n, a.logText(), b.logText())
	}
}

// waitStoppedLeaseLapsed waits until the lease of the one claim in flight in the ledger has
// lapsed by this host's clock, the one the replicas judge it by (a SQLite transaction's time,
// read after ours): its holder is stopped, so no renewal moves it on meanwhile.
func waitStoppedLeaseLapsed(t *testing.T, ledger string, g *gatewayProc) {
	t.Helper()
	held := waitOneInFlight(t, ledger, g.logText)
	time.Sleep(time.Until(held.LeaseUntil))
}

// chargeID is the demo server's charge id (ch_demo_NNNN) in an answer, or "ch_demo_" when
// there is none.
func chargeID(answer string) string {
	i := strings.Index(answer, "ch_demo_")
	if i < 0 {
		return "ch_demo_"
	}
	j := i + len("ch_demo_")
	for j < len(answer) && answer[j] >= '0' && answer[j] <= '9' {
		j++
	}
	return answer[i:j]
}

// forkedChild is the one child of the process pid (unshare --fork's command).
func forkedChild(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(pid) + "/children")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("unshare (pid %d) has children %q, want one", pid, f)
	}
	child, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	return child
}
