package httpfront_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/internal/mcptest"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
)

var (
	buildOnce sync.Once
	efBin     string
	buildErr  error
)

// binary builds the effectfence binary once for the tests that run real gateway processes.
func binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "httpfront-bin-")
		if err != nil {
			buildErr = err
			return
		}
		efBin, buildErr = cmdtest.Build(dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return efBin
}

// replica is one `effectfence wrap --listen` process.
type replica struct {
	cmd *exec.Cmd
	url string
	log *logBuf
}

func startReplica(t *testing.T, ledger, effects string) *replica {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary(t), "wrap", "--ledger", ledger, "--scope", "replicas", "--listen", "127.0.0.1:0",
		"--max-sessions", "100", "--grace", "500ms", "--", exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), mcptest.Env(effects, "")...)
	r := &replica{cmd: cmd, log: &logBuf{}}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(r.log, line)
			if u, ok := strings.CutPrefix(line, "effectfence wrap: listening on "); ok {
				found <- u
			}
		}
	}()
	select {
	case r.url = <-found:
	case <-time.After(60 * time.Second):
		t.Fatalf("replica did not start listening:\n%s", r.log.String())
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("replica %s log:\n%s", r.url, r.log.String())
		}
	})
	return r
}

func (r *replica) client(t *testing.T) *gw {
	return &gw{t: t, url: r.url, log: r.log}
}

// Three gateway processes on one PostgreSQL ledger, 50 clients (a session each, on a random
// replica) sending duplicates of 10 calls: each call runs once, and every duplicate, on
// whichever replica, gets the same answer. Then a replica is killed (SIGKILL) mid-call: the
// same call on another replica is refused as unknown, not run again.
func TestReplicasOnPostgres(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts three gateways and 50 sessions")
	}
	ledger := pgtest.Ledger(t, "httpfront_replicas")
	effects := filepath.Join(t.TempDir(), "effects")
	reps := []*replica{startReplica(t, ledger, effects), startReplica(t, ledger, effects), startReplica(t, ledger, effects)}

	const clients, intents, callsEach = 50, 10, 3
	var mu sync.Mutex
	answers := map[int]map[string]bool{} // intent -> distinct answers
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			g := reps[rng.IntN(len(reps))].client(t)
			sid := g.open(nil)
			for k := range callsEach {
				i := rng.IntN(intents)
				r, err := g.post(context.Background(), sid, nil, call(100*c+k, "slow", fmt.Sprintf(`{"ms":200,"tag":"i%d"}`, i)))
				if err != nil {
					t.Error(err)
					return
				}
				text := resultText(t, r.last(t))
				mu.Lock()
				if answers[i] == nil {
					answers[i] = map[string]bool{}
				}
				answers[i][text] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	runs := map[string]int{} // "slow tag=X" -> executions
	for _, e := range mcptest.Effects(effects) {
		runs[strings.SplitN(e, " pid=", 2)[0]]++
	}
	for i, as := range answers {
		if n := runs[fmt.Sprintf("slow tag=i%d", i)]; n != 1 {
			t.Errorf("intent i%d ran %d times across the replicas, want 1", i, n)
		}
		if len(as) != 1 {
			t.Errorf("intent i%d got %d different answers: %v", i, len(as), as)
		}
	}

	// Kill a replica mid-call.
	victim := reps[0].client(t)
	sid := victim.open(nil)
	go func() {
		_, _ = victim.post(context.Background(), sid, nil, call(9000, "slow", `{"ms":4000,"tag":"killed"}`))
	}()
	for !strings.Contains(reps[0].log.String(), "slow tag=killed started") {
		time.Sleep(20 * time.Millisecond)
	}
	_ = reps[0].cmd.Process.Kill()
	other := reps[1].client(t)
	r := other.mustPost(other.open(nil), nil, call(9001, "slow", `{"ms":4000,"tag":"killed"}`))
	if last := r.raw[len(r.raw)-1]; !strings.Contains(last, "prior_failure") {
		t.Fatalf("the call of a killed replica, sent to another, was answered %s; want an unknown-outcome refusal", last)
	}
	if strings.Contains(reps[1].log.String(), "slow tag=killed started") {
		t.Fatal("the killed replica's call was started again on another replica")
	}
}

// A gateway that stops while a duplicate in it waits for another process's attempt gives that
// duplicate its grace, then tells it it was not executed, rather than holding the stop for as
// long as --wait (the attempts in flight are shared by its sessions, so the front must end
// those waits itself).
func TestStoppingGatewayEndsWaitsOnAnotherProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two gateways")
	}
	dir := t.TempDir()
	ledger, effects := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "effects")
	a, b := startReplica(t, ledger, effects), startReplica(t, ledger, effects)
	const slow = `{"ms":8000,"tag":"wait"}`
	ga := a.client(t)
	sa := ga.open(nil)
	go func() { _, _ = ga.post(context.Background(), sa, nil, call(1, "slow", slow)) }()
	for !strings.Contains(a.log.String(), "slow tag=wait started") {
		time.Sleep(20 * time.Millisecond)
	}
	gb := b.client(t)
	sb := gb.open(nil)
	answer := make(chan string, 1)
	go func() {
		r, err := gb.post(context.Background(), sb, nil, call(2, "slow", slow))
		if err != nil || len(r.raw) == 0 {
			answer <- fmt.Sprintf("no answer: %v", err)
			return
		}
		answer <- r.raw[len(r.raw)-1]
	}()
	time.Sleep(500 * time.Millisecond) // the duplicate is waiting in b (--wait is 30 s by default)
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	got := <-answer
	if !strings.Contains(got, "NOT executed") || strings.Contains(got, "slow done") {
		t.Fatalf("the waiting duplicate of a stopping gateway was answered %s; want the not-executed refusal before the other attempt ends", got)
	}
	if strings.Contains(b.log.String(), "slow tag=wait started") {
		t.Fatal("the duplicate ran in the stopping gateway")
	}
}
