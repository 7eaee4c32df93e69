//go:build unix

package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgcluster"
	"github.com/jackc/pgx/v5"
)

// The adversary of these tests is the PostgreSQL server itself: a private cluster
// (pkg/internal/pgcluster) killed with SIGKILL, every process of it or one backend, restarted
// into crash recovery, and failed over to a streaming standby. The shared test server is not
// touched.

// crashLedger is the ledger URL of a schema in c's database postgres, for wrap processes.
func crashLedger(c *pgcluster.Cluster, hosts ...*pgcluster.Cluster) string {
	u := c.URL("postgres", "search_path=ledger", "pool_max_conns=4")
	if len(hosts) > 0 {
		addrs := []string{c.Addr()}
		for _, h := range hosts {
			addrs = append(addrs, h.Addr())
		}
		u = strings.Replace(u, c.Addr(), strings.Join(addrs, ","), 1) + "&target_session_attrs=read-write"
	}
	return u
}

// ledgerRecords reads every record of the ledger at url (directly, as SQL) by the tag of its
// arguments.
func ledgerRecords(t *testing.T, url string) map[string]fence.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT body FROM ledger.effectfence_records")
	if err != nil {
		t.Fatal(err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]fence.Record{}
	for _, b := range bodies {
		var rec fence.Record
		var args struct {
			Tag string `json:"tag"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatalf("record %s: %v", b, err)
		}
		_ = json.Unmarshal(rec.Args, &args)
		out[args.Tag] = rec
	}
	return out
}

// certText is the text of a done record's result.
func certText(rec fence.Record) string {
	if rec.Cert == nil {
		return ""
	}
	var x result
	_ = json.Unmarshal(rec.Cert.Result, &x)
	return x.text()
}

// executions counts the effects file's executions of slow by tag.
func (r *rig) executions() map[string]int {
	n := map[string]int{}
	for _, line := range effectLines(r.effects) {
		// "slow tag=T pid=P n=N"
		if rest, ok := strings.CutPrefix(line, "slow tag="); ok {
			n[strings.Fields(rest)[0]]++
		}
	}
	return n
}

func effectLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// ledgerStats runs `effectfence ledger stats --json` on url.
func (r *rig) ledgerStats(t *testing.T, url string) fence.Counters {
	t.Helper()
	cmd := exec.Command(efBin, "ledger", "stats", "--ledger", url, "--json")
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(r.dir, "state"))
	out, err := cmd.Output()
	var stats struct{ Counters fence.Counters }
	if err != nil || json.Unmarshal(out, &stats) != nil {
		t.Fatalf("ledger stats: %v %s", err, out)
	}
	return stats.Counters
}

// spooled lists the outcomes waiting in the rig's spools.
func (r *rig) spooled() []string {
	files, _ := filepath.Glob(filepath.Join(r.dir, "state", "effectfence", "spool", "*", "*.json"))
	return files
}

// answer is what one agent's call got.
type answer struct {
	wrap, tag, kind, text string // kind: ok, replay, refused (a tool error), rpc (a JSON-RPC error)
}

func classify(x result, err error) (kind, text string) {
	switch {
	case err != nil:
		return "rpc", err.Error()
	case x.IsError:
		return "refused", x.text()
	case x.replayed():
		return "replay", x.text()
	}
	return "ok", x.text()
}

// TestServerCrashesAroundCalls: two wrap processes share a ledger on a private PostgreSQL
// whose server defaults to synchronous_commit=off (its WAL writer sleeping 10 s), while agents
// call a slow tool with frequent duplicates and the server is killed over and over: every
// process of it at once (then restarted: crash recovery) or one backend (the postmaster ends
// the others and recovers by itself), at any point of a claim, a call running in the child,
// the commit right after the child answered, a coalescing wait or a replay. docs/postgres.md:
// every admission and outcome is a committed transaction before the fence answers; an
// outcome that cannot be recorded is retried and spooled, and recorded once the server is
// back; the counters count each call once. So: no call runs twice; every success an agent was
// answered is the ledger's done record, and its duplicates replay it; no call that ran is
// left free to run again; the ledger's admissions are its records, and its replays the
// replays the agents received.
func TestServerCrashesAroundCalls(t *testing.T) {
	c := pgcluster.New(t, "synchronous_commit = off", "wal_writer_delay = 10000ms")
	r := newRig(t)
	r.ledger = crashLedger(c)
	ws := []*wrapProc{r.wrap("--lease-secs", "3"), r.wrap("--lease-secs", "3")}
	var mu sync.Mutex
	var answers []answer
	var tags []string
	newTag := func(rnd *rand.Rand) string {
		mu.Lock()
		defer mu.Unlock()
		if len(tags) == 0 || rnd.IntN(10) < 3 {
			tags = append(tags, fmt.Sprintf("op-%d", len(tags)))
			return tags[len(tags)-1]
		}
		return tags[max(0, len(tags)-1-rnd.IntN(6))]
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, w := range ws {
		for k := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rnd := rand.New(rand.NewPCG(uint64(i), uint64(k)))
				for {
					select {
					case <-stop:
						return
					default:
					}
					tag := newTag(rnd)
					x, err := callE(w.Session, "slow", slowArgs(tag))
					kind, text := classify(x, err)
					mu.Lock()
					answers = append(answers, answer{fmt.Sprint(i), tag, kind, text})
					mu.Unlock()
					if kind != "ok" && kind != "replay" {
						time.Sleep(100 * time.Millisecond)
					}
				}
			}()
		}
	}
	rnd := rand.New(rand.NewPCG(7, 7))
	var faults []string
	for round := range 8 {
		time.Sleep(time.Duration(300+rnd.IntN(900)) * time.Millisecond)
		if round%2 == 0 {
			down := time.Duration(200+rnd.IntN(3000)) * time.Millisecond
			c.Crash()
			time.Sleep(down)
			c.Start()
			faults = append(faults, fmt.Sprintf("crash, down %v", down))
			continue
		}
		pids := c.Query("postgres", "SELECT pid::text FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")
		if len(pids) == 0 {
			continue
		}
		var pid int
		fmt.Sscan(pids[rnd.IntN(len(pids))], &pid)
		c.KillBackend(pid)
		faults = append(faults, fmt.Sprintf("kill -9 backend %d", pid))
	}
	close(stop)
	wg.Wait()
	t.Logf("faults: %v", faults)

	// Every op is asked again until the ledger answers it for good (a replay, or a refusal
	// of an outcome that is not known); spooled outcomes are drained meanwhile.
	mu.Lock()
	all := append([]string(nil), tags...)
	mu.Unlock()
	ranBefore := r.executions()
	final := map[string]answer{}
	deadline := time.Now().Add(90 * time.Second)
	for _, tag := range all {
		for {
			x, err := callE(ws[0].Session, "slow", slowArgs(tag))
			kind, text := classify(x, err)
			final[tag] = answer{"0", tag, kind, text}
			if kind == "replay" || kind == "ok" || (kind == "refused" && !strings.Contains(text, "in flight") && !strings.Contains(text, "ledger")) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, w := range ws {
		w.Close()
	}

	recs := ledgerRecords(t, c.URL("postgres"))
	runs := r.executions()
	counts := map[string]int{}
	replays := 0
	for _, a := range answers {
		counts[a.kind]++
		if a.kind == "replay" {
			replays++
		}
	}
	for _, a := range final {
		counts["final "+a.kind]++
		if a.kind == "replay" {
			replays++
		}
	}
	t.Logf("%d ops, %d executions, answers %v, spooled left %v", len(all), len(runs), counts, r.spooled())
	logs := func() string { return "wrap 0:\n" + ws[0].log.String() + "\nwrap 1:\n" + ws[1].log.String() }
	for tag, n := range runs {
		if n > 1 {
			t.Errorf("%s ran %d times", tag, n)
		}
		rec, ok := recs[tag]
		if !ok || (rec.State != fence.StateDone && rec.State != fence.StateUnknown && rec.State != fence.StateInFlight) {
			t.Errorf("%s ran, and the ledger leaves it free to run again: %+v", tag, rec)
		}
	}
	for _, a := range append(answers, mapValues(final)...) {
		if a.kind != "ok" && a.kind != "replay" {
			continue
		}
		rec := recs[a.tag]
		if rec.State != fence.StateDone || certText(rec) != a.text {
			t.Errorf("%s was answered %s %q, and the ledger holds %s %q", a.tag, a.kind, a.text, rec.State, certText(rec))
		}
		if runs[a.tag] != 1 {
			t.Errorf("%s was answered %s %q, and ran %d times", a.tag, a.kind, a.text, runs[a.tag])
		}
	}
	for _, a := range final {
		if a.kind != "replay" && ranBefore[a.tag] == 1 && recs[a.tag].State == fence.StateDone {
			t.Errorf("%s is done, and its last duplicate was answered %s %q", a.tag, a.kind, a.text)
		}
	}
	if s := r.spooled(); len(s) > 0 {
		t.Errorf("outcomes left in the spool: %v", s)
	}
	st := r.ledgerStats(t, c.URL("postgres", "search_path=ledger"))
	t.Logf("ledger counters %+v", st)
	if st.Admitted != uint64(len(recs)) || st.Reclaimed != 0 {
		t.Errorf("the ledger counts %d admissions (%d reclaimed) for %d records", st.Admitted, st.Reclaimed, len(recs))
	}
	if st.Replayed+st.Coalesced != uint64(replays) {
		t.Errorf("the ledger counts %d replays and %d coalesced for %d replays answered", st.Replayed, st.Coalesced, replays)
	}
	if t.Failed() {
		keys := make([]string, 0, len(recs))
		for k := range recs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			t.Logf("record %s: %s %q (%s)", k, recs[k].State, certText(recs[k]), recs[k].Reason)
		}
		t.Logf("%s", logs())
	}
}

// slowArgs are the arguments of op tag's calls: every duplicate the same, the op taking 0 to
// 390 ms.
func slowArgs(tag string) string {
	var n int
	fmt.Sscanf(tag, "op-%d", &n)
	return fmt.Sprintf(`{"ms":%d,"tag":%q}`, n*37%400, tag)
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
