package sqlite_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestMain lets the test binary act as a racing process (see raceHelper).
func TestMain(m *testing.M) {
	if os.Getenv("EFFECTFENCE_TEST_HOLDER") != "" {
		if err := holderHelper(); err != nil {
			fmt.Fprintln(os.Stderr, "holder:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if path := os.Getenv("EFFECTFENCE_TEST_CHECK"); path != "" {
		// sqlite.Check in a process of its own (a mount namespace, say): prints the report.
		r, err := sqlite.Check(context.Background(), path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "check:", err)
			os.Exit(1)
		}
		fmt.Printf("kind %s\nproblems %q\nadvice %q\nstates %v\n", r.Kind, r.Problems, r.Advice, r.States)
		os.Exit(0)
	}
	if mode := os.Getenv("EFFECTFENCE_TEST_QUEUE"); mode != "" {
		if err := queueHelper(mode); err != nil {
			fmt.Fprintln(os.Stderr, "queue helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if path := os.Getenv("EFFECTFENCE_TEST_OPEN_LEDGER"); path != "" {
		// store.Open in a process of its own (another user's, say): prints what it answered.
		// With EFFECTFENCE_TEST_OPEN_WAIT set it first waits for a line on its standard input,
		// so that a test can start several at once.
		if os.Getenv("EFFECTFENCE_TEST_OPEN_WAIT") != "" {
			if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
				fmt.Println("no go:", err)
				os.Exit(0)
			}
		}
		fmt.Println(openerHelper(path))
		os.Exit(0)
	}
	if os.Getenv("EFFECTFENCE_TEST_RACER") != "" {
		if err := raceHelper(); err != nil {
			fmt.Fprintln(os.Stderr, "racer:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if path := os.Getenv("EFFECTFENCE_TEST_MIGRATOR"); path != "" {
		if err := migrateChild(path); err != nil {
			fmt.Fprintln(os.Stderr, "migrator:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// raceHelper is one racing process. It opens the ledger, then for each round: prints
// "ready R", waits for the parent to create the barrier file go-R, and attempts intent
// race:R. If admitted, it appends its pid to the round's effect file (the external side
// effect, fsynced), holds the effect for a moment so that others find it in flight, commits,
// and prints "R fresh HASH"; otherwise "R replay HASH" or "R refused CODE".
func raceHelper() error {
	ledger, dir := os.Getenv("EFFECTFENCE_TEST_LEDGER"), os.Getenv("EFFECTFENCE_TEST_DIR")
	rounds, err := strconv.Atoi(os.Getenv("EFFECTFENCE_TEST_ROUNDS"))
	if err != nil {
		return err
	}
	st, err := sqlite.Open(ctx, ledger, sqlite.Options{})
	if err != nil {
		return err
	}
	eng := fence.New(st, fence.Config{})
	defer eng.Close()
	for r := range rounds {
		fmt.Printf("ready %d\n", r)
		for {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("go-%d", r))); err == nil {
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
		req := fence.Request{Intent: fmt.Sprintf("race:%d", r), Tool: "charge_card", Args: []byte(`{"amount":4900}`), Agent: strconv.Itoa(os.Getpid())}
		adm, err := eng.Prepare(ctx, req)
		var coded interface{ Code() string }
		switch {
		case errors.As(err, &coded):
			fmt.Printf("%d refused %s\n", r, coded.Code())
		case err != nil:
			return err
		case adm.Fresh():
			if err := appendEffect(filepath.Join(dir, fmt.Sprintf("effects-%d", r))); err != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond)
			cert, err := eng.Commit(ctx, *adm.Ticket, []byte(fmt.Sprintf(`{"charged_by":%d}`, os.Getpid())))
			if err != nil {
				return err
			}
			fmt.Printf("%d fresh %s\n", r, cert.Hash)
		default:
			fmt.Printf("%d replay %s\n", r, adm.Cert.Hash)
		}
	}
	return nil
}

func appendEffect(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(f, "%d\n", os.Getpid()); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Eight real processes race one intent per round on one ledger file, many rounds: exactly one
// executes (counted in an external file), every other attempt replays that execution's cert
// or is told the intent is in flight.
func TestProcessesRaceOneIntent(t *testing.T) {
	const procs, rounds = 8, 25
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.db")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		proc int
		text string
	}
	lines := make(chan line, procs*rounds*2)
	var cmds []*exec.Cmd
	stderrs := make([]*bytes.Buffer, procs)
	var readers sync.WaitGroup
	for p := range procs {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), "EFFECTFENCE_TEST_RACER=1", "EFFECTFENCE_TEST_LEDGER="+ledger,
			"EFFECTFENCE_TEST_DIR="+dir, "EFFECTFENCE_TEST_ROUNDS="+strconv.Itoa(rounds))
		stderrs[p] = new(bytes.Buffer)
		cmd.Stderr = stderrs[p]
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
		readers.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- line{p, sc.Text()}
			}
			lines <- line{p, "exit"}
		})
	}
	go func() { readers.Wait(); close(lines) }()
	killAll := func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
	}
	defer killAll()

	ready := map[int]int{}
	results := map[int][]string{}
	answered := make([]int, procs)
	for l := range lines {
		f := strings.Fields(l.text)
		if f[0] == "exit" {
			// A process that stops early would leave the others waiting at the barrier.
			if answered[l.proc] != rounds {
				killAll()
				cmds[l.proc].Wait()
				t.Fatalf("racing process %d stopped after %d of %d rounds: %s", l.proc, answered[l.proc], rounds, stderrs[l.proc])
			}
			continue
		}
		if f[0] == "ready" {
			r, _ := strconv.Atoi(f[1])
			if ready[r]++; ready[r] == procs {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("go-%d", r)), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		r, _ := strconv.Atoi(f[0])
		answered[l.proc]++
		results[r] = append(results[r], strings.Join(f[1:], " "))
	}
	for p, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("racing process %d failed: %v\n%s", p, err, stderrs[p])
		}
	}
	inFlight, replays := 0, 0
	for r := range rounds {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("effects-%d", r)))
		if err != nil {
			t.Fatalf("round %d: no execution at all: %v", r, err)
		}
		if n := strings.Count(string(b), "\n"); n != 1 {
			t.Errorf("round %d: %d executions (pids %q); want exactly 1", r, n, b)
		}
		if len(results[r]) != procs {
			t.Fatalf("round %d: %d answers; want %d", r, len(results[r]), procs)
		}
		var hash string
		fresh := 0
		for _, res := range results[r] {
			if h, ok := strings.CutPrefix(res, "fresh "); ok {
				fresh++
				hash = h
			}
		}
		if fresh != 1 {
			t.Errorf("round %d: %d processes were admitted: %v", r, fresh, results[r])
		}
		for _, res := range results[r] {
			switch {
			case strings.HasPrefix(res, "fresh "):
			case res == "replay "+hash:
				replays++
			case res == "refused intent_in_flight":
				inFlight++
			default:
				t.Errorf("round %d: answer %q; want a replay of %s or intent_in_flight", r, res, hash)
			}
		}
	}
	t.Logf("%d rounds x %d processes: %d replays, %d told in flight, 1 execution per round", rounds, procs, replays, inFlight)

	// The ledger's counters are every process's, each attempt in exactly one bucket: the
	// processes flushed them as they wrote and as they closed.
	st := openT(t, ledger, sqlite.Options{})
	s, err := fence.New(st, fence.Config{}).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := fence.Counters{Admitted: rounds, Replayed: uint64(replays), InFlight: uint64(inFlight)}
	if s.Ledger != want || s.Ledger.Total() != procs*rounds || s.Ledger.Prevented() != (procs-1)*rounds || !s.SinceBoot.IsZero() {
		t.Fatalf("ledger stats after %d processes: %+v (total %d, prevented %d), since boot %+v; want %+v, total %d, prevented %d",
			procs, s.Ledger, s.Ledger.Total(), s.Ledger.Prevented(), s.SinceBoot, want, procs*rounds, (procs-1)*rounds)
	}
}
