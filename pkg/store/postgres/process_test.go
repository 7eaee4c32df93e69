package postgres

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/effectfence/effectfence/pkg/fence"
)

// The storm child: this test binary re-run with these variables set is one racing process.
const (
	envChildSchema  = "EFFECTFENCE_PG_STORM_SCHEMA"
	envChildIntents = "EFFECTFENCE_PG_STORM_INTENTS"
	envChildStart   = "EFFECTFENCE_PG_STORM_START" // unix ms at which every worker starts
	stormWorkers    = 16
)

func TestMain(m *testing.M) {
	if os.Getenv(envChildSchema) != "" {
		os.Exit(stormChild())
	}
	os.Exit(m.Run())
}

// stormResult is what a child reports on stdout.
type stormResult struct {
	Executed int               `json:"executed"`
	Replayed int               `json:"replayed"`
	Results  map[string]string `json:"results"` // intent -> the result its answers carried
	Errors   []string          `json:"errors"`
	Stats    fence.Counters    `json:"stats"`
}

func stormIntent(i int) fence.Request {
	r := fence.Request{Intent: fmt.Sprintf("storm:%d", i), Tool: "charge_card", Args: []byte(fmt.Sprintf(`{"amount":%d}`, 100+i)), Agent: "storm"}
	if i%2 == 0 {
		r.Domain = fmt.Sprintf("acct:%d", i%4)
	}
	return r
}

// stormChild races 16 goroutines over every intent through one store; each fresh admission
// runs the effect (a row in the witness table, outside the fence) and commits its result.
func stormChild() int {
	schema := os.Getenv(envChildSchema)
	intents, _ := strconv.Atoi(os.Getenv(envChildIntents))
	startMs, _ := strconv.ParseInt(os.Getenv(envChildStart), 10, 64)
	url := os.Getenv(EnvTestURL)
	ctx := context.Background()
	s, err := Open(ctx, Config{URL: url, Schema: schema, MaxConns: 8})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	e := fence.New(s, fence.Config{})
	wcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	wcfg.MaxConns = 4
	wcfg.ConnConfig.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	effects, err := pgxpool.NewWithConfig(ctx, wcfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer effects.Close()

	var mu sync.Mutex
	res := stormResult{Results: map[string]string{}}
	fail := func(format string, args ...any) {
		mu.Lock()
		res.Errors = append(res.Errors, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	time.Sleep(time.Until(time.UnixMilli(startMs)))
	var wg sync.WaitGroup
	for w := range stormWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			who := fmt.Sprintf("%d/%d", os.Getpid(), w)
			for i := range intents {
				r := stormIntent(i)
				adm, err := e.PrepareWait(ctx, r, 20*time.Second)
				if err != nil {
					fail("%s %s: prepare: %v", who, r.Intent, err)
					continue
				}
				var cert *fence.Cert
				if adm.Fresh() {
					if _, err := effects.Exec(ctx, "INSERT INTO witness (intent, who) VALUES ($1, $2)", r.Intent, who); err != nil {
						fail("%s %s: effect: %v", who, r.Intent, err)
						continue
					}
					result, _ := json.Marshal(map[string]string{"charged_by": who})
					if cert, err = e.Commit(ctx, *adm.Ticket, result); err != nil {
						fail("%s %s: commit: %v", who, r.Intent, err)
						continue
					}
				} else {
					cert = adm.Cert
				}
				if err := cert.Verify(); err != nil {
					fail("%s %s: %v", who, r.Intent, err)
				}
				mu.Lock()
				if adm.Fresh() {
					res.Executed++
				} else {
					res.Replayed++
				}
				if prev, ok := res.Results[r.Intent]; ok && prev != string(cert.Result) {
					res.Errors = append(res.Errors, fmt.Sprintf("%s: answers carry %s and %s", r.Intent, prev, cert.Result))
				}
				res.Results[r.Intent] = string(cert.Result)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	st, err := e.Stats(ctx)
	if err != nil {
		fail("stats: %v", err)
	}
	res.Stats = st.SinceBoot
	if err := e.Close(); err != nil {
		fail("close: %v", err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 2
	}
	return 0
}

// TestProcessStorm: 3 OS processes × 16 goroutines race the same intents through one
// PostgreSQL ledger. The witness table, written by the effect itself outside the fence, must
// hold exactly one row per intent, and every answer must carry the executor's result.
func TestProcessStorm(t *testing.T) {
	t.Parallel()
	const procs = 3
	intents := 40
	if testing.Short() {
		intents = 12
	}
	schema := testSchema(t)
	s := openSchema(t, schema) // creates the schema before the children race
	conn := admin(t, schema)
	if _, err := conn.Exec(context.Background(), "CREATE TABLE witness (intent text NOT NULL, who text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	type child struct {
		cmd    *exec.Cmd
		out    bytes.Buffer
		stderr bytes.Buffer
	}
	children := make([]*child, procs)
	for i := range children {
		c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$")}
		c.cmd.Env = append(os.Environ(), envChildSchema+"="+schema, envChildIntents+"="+strconv.Itoa(intents), envChildStart+"="+strconv.FormatInt(start, 10))
		c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.stderr
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	var total stormResult
	answers := map[string]map[string]bool{} // intent -> distinct results seen
	pids := map[int]bool{}
	for _, c := range children {
		err := c.cmd.Wait()
		if err != nil {
			t.Fatalf("child %d: %v\nstderr: %s", c.cmd.Process.Pid, err, c.stderr.String())
		}
		pids[c.cmd.Process.Pid] = true
		var r stormResult
		sc := bufio.NewScanner(&c.out)
		sc.Buffer(nil, 1<<24)
		var last []byte
		for sc.Scan() {
			last = append(last[:0], sc.Bytes()...)
		}
		if err := json.Unmarshal(last, &r); err != nil {
			t.Fatalf("child %d output %q: %v", c.cmd.Process.Pid, c.out.String(), err)
		}
		for _, e := range r.Errors {
			t.Errorf("child %d: %s", c.cmd.Process.Pid, e)
		}
		total.Executed += r.Executed
		total.Replayed += r.Replayed
		total.Stats = total.Stats.Add(r.Stats)
		for intent, res := range r.Results {
			if answers[intent] == nil {
				answers[intent] = map[string]bool{}
			}
			answers[intent][res] = true
		}
	}
	if len(pids) != procs {
		t.Fatalf("%d distinct child processes", len(pids))
	}
	attempts := procs * stormWorkers * intents
	if total.Executed+total.Replayed != attempts {
		t.Fatalf("answers %d + %d, want %d", total.Executed, total.Replayed, attempts)
	}
	// The external witness.
	rows, err := conn.Query(context.Background(), "SELECT intent, count(*), min(who) FROM witness GROUP BY intent")
	if err != nil {
		t.Fatal(err)
	}
	executedBy := map[string]string{}
	for rows.Next() {
		var intent, who string
		var n int
		if err := rows.Scan(&intent, &n, &who); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("intent %s executed %d times", intent, n)
		}
		executedBy[intent] = who
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(executedBy) != intents || total.Executed != intents {
		t.Fatalf("witness saw %d intents executed, children reported %d executions; want %d", len(executedBy), total.Executed, intents)
	}
	for intent, who := range executedBy {
		want, _ := json.Marshal(map[string]string{"charged_by": who})
		if len(answers[intent]) != 1 || !answers[intent][string(want)] {
			t.Errorf("intent %s executed by %s, answers carried %v", intent, who, answers[intent])
		}
	}
	// Domain numbers: each domain's certs are numbered 1..n without a repeat.
	e := fence.New(s, fence.Config{})
	seqs := map[string]map[uint64]bool{}
	for i := range intents {
		r := stormIntent(i)
		st, err := e.Status(context.Background(), r.Intent)
		if err != nil || st.State != fence.StateDone {
			t.Fatalf("%s: %+v %v", r.Intent, st, err)
		}
		if r.Domain != "" {
			if seqs[r.Domain] == nil {
				seqs[r.Domain] = map[uint64]bool{}
			}
			if seqs[r.Domain][st.Seq] {
				t.Errorf("domain %s seq %d used twice", r.Domain, st.Seq)
			}
			seqs[r.Domain][st.Seq] = true
		}
	}
	ledger, err := e.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ledger.Ledger != total.Stats {
		t.Errorf("ledger counters %+v, children's own %+v", ledger.Ledger, total.Stats)
	}
	if ledger.Ledger.Admitted != uint64(intents) || ledger.Ledger.Total() != uint64(attempts) {
		t.Errorf("ledger: %s; want admitted=%d total=%d", ledger.Ledger.Line(), intents, attempts)
	}
	t.Logf("%d processes × %d goroutines × %d intents: executions=%d (witness rows=%d); ledger: %s",
		procs, stormWorkers, intents, total.Executed, len(executedBy), ledger.Ledger.Line())
}

// TestLeaseTakeover: a re-run-safe holder paused past its short lease (a real sleep) is taken
// over by another process's engine on its own connections; the holder's late commit and
// heartbeat get lease_lost, and the recorded outcome is the new holder's. (A claim not declared
// re-run safe becomes unknown instead: the contract suite's LeaseExpiryFencesByDefault.)
func TestLeaseTakeover(t *testing.T) {
	schema := testSchema(t)
	ctx := context.Background()
	const lease = 300 * time.Millisecond
	a := fence.New(openSized(t, schema, 2), fence.Config{LeaseTTL: lease, Owner: "host-a/1/1"})
	b := fence.New(openSized(t, schema, 2), fence.Config{LeaseTTL: lease, Owner: "host-b/1/1"})
	r := fence.Request{Intent: "payout:7", Tool: "payout", Args: []byte(`{"usd":70}`), Domain: "acct:7", RerunSafe: true}
	admA, err := a.Prepare(ctx, r)
	if err != nil || !admA.Fresh() {
		t.Fatal(admA, err)
	}
	if _, err := b.Prepare(ctx, r); !errors.Is(err, fence.ErrInFlight) {
		t.Fatalf("while A's lease runs: %v", err)
	}
	time.Sleep(2 * lease) // A stalls
	admB, err := b.Prepare(ctx, r)
	if err != nil || !admB.Fresh() || !admB.Ticket.Reclaimed || admB.Ticket.Token <= admA.Ticket.Token {
		t.Fatalf("takeover: %+v %v", admB.Ticket, err)
	}
	certB, err := b.Commit(ctx, *admB.Ticket, []byte(`{"paid_by":"B"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Commit(ctx, *admA.Ticket, []byte(`{"paid_by":"A"}`))
	var lost fence.LeaseLostError
	if !errors.As(err, &lost) || fence.CodeOf(err) != fence.CodeLeaseLost {
		t.Fatalf("A's late commit: %v", err)
	}
	if _, err := a.Heartbeat(ctx, *admA.Ticket); !errors.Is(err, fence.ErrLeaseLost) {
		t.Fatalf("A's late heartbeat: %v", err)
	}
	st, err := a.Status(ctx, r.Intent)
	if err != nil || st.State != fence.StateDone || st.Cert.Hash != certB.Hash || string(st.Cert.Result) != `{"paid_by":"B"}` {
		t.Fatalf("recorded: %+v %v", st, err)
	}
	adm, err := a.Prepare(ctx, r)
	if err != nil || adm.Fresh() || string(adm.Cert.Result) != `{"paid_by":"B"}` {
		t.Fatalf("duplicate after takeover: %+v %v", adm, err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stats, err := a.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Ledger.Reclaimed != 1 || stats.Ledger.LeaseLost != 2 || stats.Ledger.Admitted != 1 {
		t.Fatalf("ledger counters: %+v", stats.Ledger)
	}
}
