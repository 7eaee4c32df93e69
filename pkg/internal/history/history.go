//go:build linux

// Package history is a randomized, fault-injecting history checker for `effectfence wrap`.
//
// One Run starts several wrap processes on one ledger (a SQLite file, or a PostgreSQL schema
// reached through a TCP proxy that can cut every connection), each in front of a real child
// MCP server that records every execution of its one tool durably (an effects file, synced
// before it answers, each execution with its own id). Concurrent clients call the tool with
// frequent duplicates (the same op from several clients and wraps), while a nemesis kill -9s
// wraps and children, SIGSTOPs wraps (holders) and children past their lease and SIGCONTs them,
// cuts the database and, on a private cluster of its own (Config.CrashDB), kill -9s every
// process of the database server and restarts it into crash recovery, and fills the file system
// of a SQLite ledger and its spool, a tmpfs of the run's own, and frees it again
// (Config.FullDisk). Everything is recorded: each call and its answer, each fault, each
// execution, and the ledger's final state once every process has stopped. Check then proves
// the promise on that history (see Check).
//
// Runs are seeded (the op sequence and the faults' choices derive from the seed; the
// interleaving is the machine's) and bounded in time: the duration, then at most about a
// minute to let calls finish and processes stop.
package history

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgcluster"
	"github.com/effectfence/effectfence/pkg/internal/procs"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/jackc/pgx/v5"
)

// Config is one run.
type Config struct {
	Seed     int64
	Duration time.Duration
	// Ledger is "sqlite" or "postgres".
	Ledger string
	// Postgres is the server's URL (EFFECTFENCE_TEST_POSTGRES) when Ledger is "postgres"; the
	// run uses (and drops) a schema of its own.
	Postgres string
	// Pooler, when set, is the URL the wraps reach the ledger by instead (through the cutting
	// proxy): a pooler in front of the same server, such as PgBouncer in transaction mode,
	// which drops the search_path a client sends. Its role must then reach Schema by its own
	// default (ALTER ROLE … SET search_path); the harness still reads and drops the schema
	// through Postgres.
	Pooler string
	// CrashDB, with Ledger "postgres", puts the ledger on a private PostgreSQL cluster
	// (pkg/internal/pgcluster: the server's binaries, run as the user postgres when the
	// harness runs as root) instead of Postgres, still reached through the cutting proxy. The
	// server defaults to synchronous_commit = off with its WAL writer asleep for 10 s, as
	// pkg/wrap's TestServerCrashesAroundCalls has it (the store turns synchronous_commit on for
	// its own sessions), and the nemesis also crashes it (FaultCrashDB). Run fails when no
	// cluster can be started; the server's log is kept as postgres.log in Dir.
	CrashDB bool
	// Schema names the run's PostgreSQL schema (default history_<seed>_<pid>_<front>).
	Schema string
	// Bin is the effectfence binary.
	Bin string
	// Child is the argv of a program that calls MaybeServeChild first (it is told its effects
	// file through EnvChild).
	Child []string
	// Dir holds the ledger, the effects file, each wrap's log and the recorded history.
	Dir string
	// Wraps is how many wrap processes share the ledger (default 3); Clients how many calls
	// each serves at once (default 4).
	Wraps, Clients int
	// Lease is the wraps' lease (default 2 s); a stopped holder is kept stopped past it.
	Lease time.Duration
	// Log receives progress lines.
	Log io.Writer
	// Front is how the clients reach the wraps: "stdio" (default: each wrap is a stdio
	// process the harness starts and talks to) or "http" (each is `wrap --listen` on a port of
	// its own, kept across restarts, and the clients are Streamable HTTP clients).
	Front string
	// Pad, when over 0, adds a string of Pad bytes to every call's arguments (the same for
	// every duplicate), so that records take the ledger's large-record paths (arguments over
	// 4 KB and records over 16 KB are cached in tables of their own).
	Pad int
	// Containers runs every other wrap slot (0, 2, …) in containers on this host: each of its
	// wraps in a PID namespace of its own below the harness's, with its own /proc (unshare
	// --pid --fork --mount-proc, a shell as the namespace's init; see container.go). The
	// nemesis kills and stops those wraps and their children by their pids on the host. It
	// needs root and unshare; Run fails without them.
	Containers bool
	// FullDisk, with Ledger "sqlite", puts the ledger (and its -wal, -shm and spool, which wrap
	// keeps beside it) on a tmpfs of DiskSize bytes (DefaultDiskSize when 0) that the run
	// mounts in Dir/disk and unmounts at its end, whatever becomes of it, and the nemesis also
	// fills that file system and frees it a random time later (FaultFullDisk; see disk.go).
	// The ledger's files are copied into Dir at the end, as the wraps left them. It needs root
	// (mount); Run fails without it.
	FullDisk bool
	DiskSize int
}

// Fault is one thing the nemesis did.
type Fault struct {
	AtMs   int64  `json:"at_ms"`
	Kind   string `json:"kind"`
	Target string `json:"target"`
}

// Fault kinds.
const (
	FaultKillWrap  = "kill-wrap"
	FaultKillChild = "kill-child"
	FaultStopWrap  = "stop-wrap"
	FaultStopChild = "stop-child"
	FaultCutDB     = "cut-db"
	// FaultCrashDB is kill -9 of every process of the database server (Config.CrashDB), then
	// a restart into crash recovery 0.3 to 1.5 s later.
	FaultCrashDB = "crash-db"
	// FaultFullDisk fills the file system of the SQLite ledger and its spool (Config.FullDisk),
	// keeps it full for 0.5 to 5 s, then frees it (one window at a time).
	FaultFullDisk = "full-disk"
)

// Report is a run's history and what Check found in it.
type Report struct {
	Seed       int64            `json:"seed"`
	Ledger     string           `json:"ledger"`
	Front      string           `json:"front"`
	CrashDB    bool             `json:"crash_db,omitempty"`
	Containers []int            `json:"containers,omitempty"` // the wrap slots run in containers
	Duration   time.Duration    `json:"duration_ns"`
	Ops        []Op             `json:"ops"`
	Faults     []Fault          `json:"faults"`
	Executions []Execution      `json:"executions"`
	Final      map[string]Final `json:"final"`
	Violations []Violation      `json:"violations"`
	// StartUnixMs is when the run began; the ops' and faults' times count from it.
	StartUnixMs int64 `json:"start_unix_ms"`
	// Lease is the wraps' lease.
	Lease time.Duration `json:"lease_ns"`
	// DiskFull lists when the ledger's disk was full (Config.FullDisk).
	DiskFull []Window `json:"disk_full,omitempty"`
	// HeldOutcomes counts the outcomes the wraps' logs say were held in memory, in neither the
	// ledger nor its spool, their answers waiting for room (FullDisk runs).
	HeldOutcomes int `json:"held_outcomes,omitempty"`
	// Spooled counts the outcomes waiting in the wraps' spool when every process had stopped
	// (a PostgreSQL ledger's spool is in the wraps' state directory, a SQLite one's beside the
	// file), and SpoolLeft those still there after the final read, which drains it as the next
	// wrap would.
	Spooled   int `json:"spooled,omitempty"`
	SpoolLeft int `json:"spool_left,omitempty"`
}

// Summary is the report in a few lines: operations by answer, faults by kind, violations.
func (r *Report) Summary() string {
	var b strings.Builder
	answers := map[string]int{}
	for _, o := range r.Ops {
		answers[o.Answer]++
	}
	faults := map[string]int{}
	for _, f := range r.Faults {
		faults[f.Kind]++
	}
	states := map[string]int{}
	for _, f := range r.Final {
		states[string(f.State)]++
	}
	ledger := r.Ledger
	if r.CrashDB {
		ledger += " (a private cluster, crash-db)"
	}
	fmt.Fprintf(&b, "history: seed %d, ledger %s, front %s, %s\n", r.Seed, ledger, r.Front, r.Duration)
	if len(r.Containers) > 0 {
		slots := make([]string, len(r.Containers))
		for i, n := range r.Containers {
			slots[i] = strconv.Itoa(n)
		}
		fmt.Fprintf(&b, "containers: wraps %s, each in a PID namespace of its own below the harness's\n", strings.Join(slots, ", "))
	}
	fmt.Fprintf(&b, "operations: %d calls (%s) on %d ops; %d executions; ledger at the end: %s\n", len(r.Ops), counts(answers), len(r.Final), len(r.Executions), counts(states))
	fmt.Fprintf(&b, "faults injected: %d (%s)\n", len(r.Faults), counts(faults))
	if r.Spooled > 0 || r.SpoolLeft > 0 {
		fmt.Fprintf(&b, "spooled outcomes at the end: %d, recorded by the final read; left in the spool: %d\n", r.Spooled, r.SpoolLeft)
	}
	if len(r.DiskFull) > 0 {
		b.WriteString(r.diskSummary())
	}
	fmt.Fprintf(&b, "violations: %d\n", len(r.Violations))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
		// The faults from one lease before the op's first call to its last event.
		var near []string
		for _, f := range r.Faults {
			if f.AtMs >= v.FromMs-r.Lease.Milliseconds() && f.AtMs <= v.ToMs {
				near = append(near, fmt.Sprintf("%s %s at %.1fs", f.Kind, f.Target, float64(f.AtMs)/1000))
			}
		}
		fmt.Fprintf(&b, "    op's calls and executions span %.1fs to %.1fs; faults then: %s\n", float64(v.FromMs)/1000, float64(v.ToMs)/1000, orNone(near))
	}
	return b.String()
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, "; ")
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// run is the state of one Run.
type run struct {
	cfg    Config
	start  time.Time
	ledger string // what the wraps open
	direct string // the same ledger without the proxy, for the final read
	proxy  *netcut.Proxy
	// cluster is the private server of a CrashDB run; crashing is true while it is down or
	// recovering, dbErr why it could not be restarted.
	cluster  *pgcluster.Cluster
	crashing atomic.Bool
	dbErr    atomic.Pointer[error]
	effect   string
	rng      *rand.Rand
	rngMu    sync.Mutex

	mu     sync.Mutex
	ops    []Op
	faults []Fault
	recent []string
	nextOp int

	wraps []*wrapSlot
	// unshare is the unshare command of a Containers run; inits the host pids of every
	// container's init, checked gone at the end.
	unshare string
	inits   []hostProc
	// disk is the tmpfs of a FullDisk run; filling is true while the nemesis keeps it full;
	// windows are the spans it was full.
	disk    string
	filling atomic.Bool
	windows []Window
}

// proc is one running wrap as the clients see it: a stdio session (*mcpstdio.Session) or a
// gateway process and an HTTP client of it (httpProc).
type proc interface {
	CallTool(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error)
	Done() <-chan struct{}
	Err() error
	Pid() int
	Close() error
}

func (r *run) ms() int64 { return time.Since(r.start).Milliseconds() }

func (r *run) logf(format string, a ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, "history: "+format+"\n", a...)
	}
}

// Run runs one history and checks it. An error means the run itself could not be made (no
// binary, no database); violations are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Wraps <= 0 {
		cfg.Wraps = 3
	}
	if cfg.Clients <= 0 {
		cfg.Clients = 4
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 2 * time.Second
	}
	if cfg.Bin == "" || len(cfg.Child) == 0 || cfg.Dir == "" {
		return nil, errors.New("history: Bin, Child and Dir are required")
	}
	r := &run{cfg: cfg, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)), effect: filepath.Join(cfg.Dir, "effects.jsonl")}
	switch cfg.Front {
	case "":
		cfg.Front = "stdio"
		r.cfg.Front = "stdio"
	case "stdio", "http":
	default:
		return nil, fmt.Errorf("history: front %q: want stdio or http", cfg.Front)
	}
	if cfg.FullDisk && cfg.Ledger != "sqlite" {
		return nil, fmt.Errorf("history: full-disk fills a SQLite ledger's file system: it needs the sqlite ledger, not %s", cfg.Ledger)
	}
	switch cfg.Ledger {
	case "sqlite":
		r.ledger = filepath.Join(cfg.Dir, "ledger.db")
		if cfg.FullDisk {
			size := cfg.DiskSize
			if size <= 0 {
				size = DefaultDiskSize
			}
			r.disk = filepath.Join(cfg.Dir, "disk")
			if err := mountDisk(r.disk, size); err != nil {
				return nil, err
			}
			defer func() {
				if err := unmountDisk(r.disk); err != nil {
					r.logf("%v", err)
				}
			}()
			r.ledger = filepath.Join(r.disk, "ledger.db")
		}
		r.direct = r.ledger
	case "postgres":
		if cfg.CrashDB {
			var env pgcluster.Standalone
			defer env.Close() // the cluster killed and removed, after the schema is dropped
			if err := r.privateCluster(&env); err != nil {
				return nil, err
			}
			defer r.keepServerLog()
		}
		drop, err := r.postgres(ctx)
		if err != nil {
			return nil, err
		}
		defer drop()
		defer r.proxy.Close()
	default:
		return nil, fmt.Errorf("history: ledger %q: want sqlite or postgres", cfg.Ledger)
	}
	if cfg.CrashDB && cfg.Ledger != "postgres" {
		return nil, fmt.Errorf("history: crash-db needs the postgres ledger, not %s", cfg.Ledger)
	}
	if cfg.Containers {
		unshare, err := checkContainers()
		if err != nil {
			return nil, err
		}
		r.unshare = unshare
	}
	if err := os.WriteFile(r.effect, nil, 0o600); err != nil {
		return nil, err
	}
	r.logf("seed %d, ledger %s, front %s, %s, %d wraps x %d clients, lease %s; recording in %s", cfg.Seed, cfg.Ledger, cfg.Front, cfg.Duration, cfg.Wraps, cfg.Clients, cfg.Lease, cfg.Dir)
	r.start = time.Now()

	runCtx, stopRun := context.WithTimeout(ctx, cfg.Duration)
	defer stopRun()
	r.wraps = make([]*wrapSlot, cfg.Wraps)
	for i := range r.wraps {
		r.wraps[i] = newWrapSlot(r, i)
	}
	for _, w := range r.wraps {
		if err := w.start(); err != nil {
			for _, w := range r.wraps {
				w.stop()
			}
			if cerr := r.endContainers(); cerr != nil {
				r.logf("%v", cerr)
			}
			return nil, err
		}
	}
	var clients sync.WaitGroup
	for _, w := range r.wraps {
		for range cfg.Clients {
			clients.Add(1)
			go func() {
				defer clients.Done()
				r.client(runCtx, w)
			}()
		}
	}
	var nemesis sync.WaitGroup
	nemesis.Add(1)
	go func() {
		defer nemesis.Done()
		r.nemesis(runCtx, &nemesis)
	}()
	<-runCtx.Done()
	nemesis.Wait() // every stopped process is continued, the database reachable again
	if r.proxy != nil {
		r.proxy.Heal()
	}
	r.logf("duration over after %d calls; letting calls in flight finish", len(r.snapshotOps()))
	clients.Wait()
	for _, w := range r.wraps {
		w.stop()
	}
	if err := r.endContainers(); err != nil {
		return nil, err
	}
	if err := r.dbErr.Load(); err != nil {
		return nil, *err
	}
	if cfg.Containers {
		// A holder in a container is out of the host's sight once its namespace has ended:
		// cannot tell, never dead, so its claim is fenced only when its lease lapses (a
		// holder of the host's namespace that is gone is fenced at once). The final read,
		// which applies the engine's rules as the next process would, waits that long, else
		// a claim of a container's wrap killed in the run's last lease reads as left in
		// flight.
		time.Sleep(cfg.Lease + 500*time.Millisecond)
	}
	// A ctx ended early (a signal to the command) ends the run as its duration would: what was
	// recorded is still read and checked.
	return r.finish(context.WithoutCancel(ctx))
}

// privateCluster starts the CrashDB run's own server, whose cleanups env runs, and points the
// run at its database postgres.
func (r *run) privateCluster(env *pgcluster.Standalone) error {
	if r.cfg.Pooler != "" {
		return errors.New("history: crash-db runs its own server and takes no pooler")
	}
	var c *pgcluster.Cluster
	if err := pgcluster.Catch(func() {
		c = pgcluster.New(env, "synchronous_commit = off", "wal_writer_delay = 10000ms")
	}); err != nil {
		return fmt.Errorf("history: crash-db cannot start a private PostgreSQL cluster (it needs PostgreSQL's server binaries, run as the user postgres when this runs as root): %w", err)
	}
	r.cluster = c
	r.cfg.Postgres = c.URL("postgres")
	return nil
}

// keepServerLog copies the private server's log into the run's directory.
func (r *run) keepServerLog() {
	if b, err := os.ReadFile(r.cluster.Log()); err == nil {
		_ = os.WriteFile(filepath.Join(r.cfg.Dir, "postgres.log"), b, 0o600)
	}
}

// crashDB kills every process of the private server, and restarts it into crash recovery after
// down. A server that cannot be restarted ends the run with an error.
func (r *run) crashDB(down time.Duration) {
	defer r.crashing.Store(false)
	err := pgcluster.Catch(func() {
		r.cluster.Crash()
		time.Sleep(down)
		r.cluster.Start()
	})
	if err != nil {
		err = fmt.Errorf("history: the private PostgreSQL server did not come back after a crash: %w", err)
		r.logf("%v", err)
		r.dbErr.CompareAndSwap(nil, &err)
	}
}

// postgres creates the run's schema and the cutting proxy; the returned function drops it.
func (r *run) postgres(ctx context.Context) (func(), error) {
	if r.cfg.Postgres == "" {
		return nil, errors.New("history: ledger postgres needs a server URL (EFFECTFENCE_TEST_POSTGRES)")
	}
	u, err := url.Parse(r.cfg.Postgres)
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	schema := fmt.Sprintf("history_%d_%d_%s", r.cfg.Seed, os.Getpid(), r.cfg.Front) // runs of one process at once (each front) must not share it
	if r.cfg.Schema != "" {
		schema = r.cfg.Schema
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	direct := u.String()
	if r.cfg.Pooler != "" {
		if u, err = url.Parse(r.cfg.Pooler); err != nil {
			return nil, fmt.Errorf("history: pooler: %w", err)
		}
		q := u.Query()
		q.Set("search_path", schema) // dropped by a pooler in transaction mode; the store checks what it reaches
		u.RawQuery = q.Encode()
	}
	host := u.Host
	if u.Port() == "" {
		host += ":5432"
	}
	p, err := netcut.New(host)
	if err != nil {
		return nil, err
	}
	r.proxy, r.direct = p, direct
	u.Host = p.Addr()
	r.ledger = u.String()
	drop := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, r.cfg.Postgres)
		if err != nil {
			r.logf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(cctx)
		if _, err := conn.Exec(cctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			r.logf("dropping schema %s: %v", schema, err)
		}
	}
	return drop, nil
}

// nextOp picks the op of the next call: often one of the last few (a duplicate), else new.
func (r *run) nextOpName() (string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rngMu.Lock()
	fresh := len(r.recent) == 0 || r.rng.Float64() < 0.3
	pick := 0
	if !fresh {
		pick = r.rng.IntN(len(r.recent))
	}
	r.rngMu.Unlock()
	if fresh {
		r.nextOp++
		op := fmt.Sprintf("op-%d", r.nextOp)
		r.recent = append(r.recent, op)
		if len(r.recent) > 6 {
			r.recent = r.recent[1:]
		}
		return op, workMs(op)
	}
	op := r.recent[pick]
	return op, workMs(op)
}

// workMs is how long the child works on an op: the same for every duplicate (it is part of the
// call's arguments); one op in 16 works longer than the lease, so heartbeats carry it.
func workMs(op string) int {
	h := fnv.New32a()
	h.Write([]byte(op))
	v := h.Sum32()
	if v%16 == 0 {
		return 2500
	}
	return 20 + int(v%400)
}

func (r *run) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

func (r *run) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.intn(int(hi-lo)/int(time.Millisecond)+1))*time.Millisecond
}

// client calls ops through one wrap until ctx ends.
func (r *run) client(ctx context.Context, w *wrapSlot) {
	for ctx.Err() == nil {
		s, gen := w.session(ctx)
		if s == nil {
			return
		}
		op, ms := r.nextOpName()
		a := map[string]any{"op": op, "ms": ms}
		if r.cfg.Pad > 0 {
			a["pad"] = strings.Repeat("p", r.cfg.Pad)
		}
		args, _ := json.Marshal(a)
		o := Op{Wrap: w.i, Gen: gen, Op: op, StartMs: r.ms()}
		// The harness gives up on an answer only long after every wait and lease (then the call
		// counts as cut).
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := s.CallTool(cctx, ToolEffect, args)
		cancel()
		o.EndMs = r.ms()
		var rpc *mcpstdio.RPCError
		switch {
		case err == nil:
			classify(&o, res)
		case errors.Is(err, mcpstdio.ErrNotSent):
			o.Answer, o.Text = AnswerNotSent, err.Error()
		case errors.As(err, &rpc):
			o.Answer, o.Text = AnswerRPCError, rpc.Message
		default:
			o.Answer, o.Text = AnswerNone, err.Error()
		}
		r.mu.Lock()
		o.N = len(r.ops) + 1
		r.ops = append(r.ops, o)
		r.mu.Unlock()
		if o.Answer == AnswerRefused || o.Answer == AnswerNotSent || o.Answer == AnswerRPCError {
			// Back off as an agent would, so an outage is not a flood of instant refusals.
			time.Sleep(r.between(100*time.Millisecond, 300*time.Millisecond))
		}
	}
}

func (r *run) snapshotOps() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

func (r *run) fault(kind, target string) {
	r.mu.Lock()
	r.faults = append(r.faults, Fault{AtMs: r.ms(), Kind: kind, Target: target})
	r.mu.Unlock()
}

// nemesis injects a fault every 0.3 to 1.2 s until ctx ends. Processes it stops are continued
// by goroutines counted in wg, so waiting on wg after ctx ends leaves nothing stopped.
func (r *run) nemesis(ctx context.Context, wg *sync.WaitGroup) {
	kinds := []string{FaultKillWrap, FaultKillChild, FaultStopWrap, FaultStopChild}
	if r.proxy != nil {
		kinds = append(kinds, FaultCutDB, FaultCutDB)
	}
	if r.cluster != nil {
		kinds = append(kinds, FaultCrashDB, FaultCrashDB)
	}
	if r.disk != "" {
		kinds = append(kinds, FaultFullDisk)
	}
	var stoppedMu sync.Mutex
	stopped := map[int]bool{}
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(r.between(300*time.Millisecond, 1200*time.Millisecond)):
		}
		kind := kinds[r.intn(len(kinds))]
		if first && r.disk != "" {
			kind = FaultFullDisk // every FullDisk run, however short, has its disk full at least once
		}
		first = false
		w := r.wraps[r.intn(len(r.wraps))]
		wrapPid, gen := w.pid()
		if wrapPid == 0 && kind != FaultCutDB && kind != FaultCrashDB && kind != FaultFullDisk {
			continue // restarting
		}
		target := fmt.Sprintf("wrap %d.%d pid %d", w.i, gen, wrapPid)
		there := func(pid int) string { return "" }
		if r.contained(w.i) {
			// The pid on the host, and in the container (what the claim's owner names).
			there = func(pid int) string { return fmt.Sprintf(" (%d in its container)", nsPid(pid)) }
			target += there(wrapPid)
		}
		switch kind {
		case FaultKillWrap:
			if syscall.Kill(wrapPid, syscall.SIGKILL) == nil {
				r.fault(kind, target)
			}
		case FaultKillChild, FaultStopChild:
			kids := procs.Children(wrapPid, false)
			if len(kids) == 0 {
				continue
			}
			target = fmt.Sprintf("child pid %d%s of %s", kids[0], there(kids[0]), target)
			if kind == FaultKillChild {
				if syscall.Kill(kids[0], syscall.SIGKILL) == nil {
					r.fault(kind, target)
				}
				continue
			}
			r.stop(wg, &stoppedMu, stopped, kids[0], kind, target)
		case FaultStopWrap:
			r.stop(wg, &stoppedMu, stopped, wrapPid, kind, target)
		case FaultCutDB:
			d := r.between(500*time.Millisecond, 1500*time.Millisecond)
			r.proxy.Cut(d)
			r.fault(kind, fmt.Sprintf("every connection, for %s", d))
		case FaultCrashDB:
			if !r.crashing.CompareAndSwap(false, true) {
				continue // down or recovering
			}
			d := r.between(300*time.Millisecond, 1500*time.Millisecond)
			r.fault(kind, fmt.Sprintf("every server process (postmaster %d), restarted after %s", r.cluster.Postmaster(), d))
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.crashDB(d)
			}()
		case FaultFullDisk:
			if !r.filling.CompareAndSwap(false, true) {
				continue // full already
			}
			d := r.between(500*time.Millisecond, 5*time.Second)
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.fullDisk(d)
			}()
		}
	}
}

// stop SIGSTOPs pid past the lease and SIGCONTs it later (or when the run ends).
func (r *run) stop(wg *sync.WaitGroup, mu *sync.Mutex, stopped map[int]bool, pid int, kind, target string) {
	mu.Lock()
	defer mu.Unlock()
	if stopped[pid] || syscall.Kill(pid, syscall.SIGSTOP) != nil {
		return
	}
	stopped[pid] = true
	d := r.cfg.Lease + r.between(500*time.Millisecond, 1500*time.Millisecond)
	r.fault(kind, fmt.Sprintf("%s for %s", target, d))
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(d)
		_ = syscall.Kill(pid, syscall.SIGCONT)
		mu.Lock()
		delete(stopped, pid)
		mu.Unlock()
	}()
}

// finish reads the effects file and the ledger, checks the history and records it.
func (r *run) finish(ctx context.Context) (*Report, error) {
	rep := &Report{Seed: r.cfg.Seed, Ledger: r.cfg.Ledger, Front: r.cfg.Front, CrashDB: r.cfg.CrashDB, Duration: r.cfg.Duration, Ops: r.snapshotOps(), Final: map[string]Final{},
		StartUnixMs: r.start.UnixMilli(), Lease: r.cfg.Lease, Containers: r.containerSlots()}
	r.mu.Lock()
	rep.Faults = append([]Fault(nil), r.faults...)
	rep.DiskFull = append([]Window(nil), r.windows...)
	r.mu.Unlock()
	if r.disk != "" {
		r.keepLedger()
		rep.HeldOutcomes = countHeld(r.cfg.Dir)
	}
	execs, err := readExecutions(r.effect)
	if err != nil {
		return nil, err
	}
	rep.Executions = execs
	// Opening the ledger is what the next process would do: it fences the claims of the
	// processes that are gone, as the engine's rules say, and records the outcomes waiting in
	// the spool. A PostgreSQL ledger's spool is in the state directory (XDG_STATE_HOME), which
	// is the wraps' (spawn), not this process's: opened with its own, the final read recorded
	// none of the outcomes that wraps killed at the end had spooled, and their ops, answered,
	// read as unknown (9 answered-then-lost in seed 90's stdio run, 2026-12-07; 11 outcomes
	// were in the wraps' spool).
	spool := r.spoolDir()
	rep.Spooled = countSpooled(spool)
	var led *store.Ledger
	err = withStateHome(filepath.Join(r.cfg.Dir, "state"), func() (err error) {
		led, err = store.Open(ctx, store.Options{Ledger: r.direct, LeaseTTL: r.cfg.Lease})
		return err
	})
	rep.SpoolLeft = countSpooled(spool)
	if err != nil {
		return nil, fmt.Errorf("history: opening the ledger for the final read: %w", err)
	}
	defer led.Close()
	err = led.Store().View(ctx, func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{}, func(rec *fence.Record) bool {
			var a struct {
				Op string `json:"op"`
			}
			if rec.Tool != ToolEffect || json.Unmarshal(rec.Args, &a) != nil || a.Op == "" {
				return true
			}
			f := Final{State: rec.State}
			if rec.State == fence.StateDone && rec.Cert != nil {
				var res struct {
					StructuredContent Answer `json:"structuredContent"`
				}
				_ = json.Unmarshal(rec.Cert.Result, &res)
				f.Exec = res.StructuredContent.Exec
			}
			rep.Final[a.Op] = f
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("history: reading the ledger: %w", err)
	}
	rep.Violations = Check(rep.Ops, rep.Executions, rep.Final, rep.StartUnixMs)
	b, err := json.MarshalIndent(rep, "", " ")
	if err == nil {
		err = os.WriteFile(filepath.Join(r.cfg.Dir, "history.json"), b, 0o600)
	}
	if err != nil {
		return nil, fmt.Errorf("history: recording the history: %w", err)
	}
	return rep, nil
}

func readExecutions(path string) ([]Execution, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("history: the effects file: %w", err)
	}
	defer f.Close()
	var out []Execution
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var x Execution
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			return nil, fmt.Errorf("history: effects file line %q: %w", sc.Text(), err)
		}
		out = append(out, x)
	}
	return out, sc.Err()
}

// wrapSlot is one wrap process, restarted after it dies until the run stops it.
type wrapSlot struct {
	r *run
	i int

	mu      sync.Mutex
	cur     proc
	port    int // the HTTP front's port, kept across restarts
	gen     int
	changed chan struct{} // closed when cur changes
	closing bool
	done    chan struct{} // closed when the keeper goroutine ends
	log     *os.File
}

func newWrapSlot(r *run, i int) *wrapSlot {
	return &wrapSlot{r: r, i: i, changed: make(chan struct{}), done: make(chan struct{})}
}

func (w *wrapSlot) argv() []string {
	cfg := w.r.cfg
	argv := []string{cfg.Bin, "wrap", "--ledger", w.r.ledger, "--lease-secs", strconv.FormatFloat(cfg.Lease.Seconds(), 'f', -1, 64), "--wait", "5s", "--grace", "1s", "--"}
	return append(argv, cfg.Child...)
}

// start starts the first process and the goroutine that restarts it.
func (w *wrapSlot) start() error {
	f, err := os.Create(filepath.Join(w.r.cfg.Dir, fmt.Sprintf("wrap-%d.log", w.i)))
	if err != nil {
		return err
	}
	w.log = f
	// A first start can fail for a passing reason: the HTTP front's port, free when it was
	// picked, taken by another process before the wrap bound it, or a start slower than its
	// 30 s on a loaded machine. Three tries, each HTTP one on a newly picked port.
	var s proc
	for try := 1; ; try++ {
		if s, err = w.spawn(); err == nil {
			break
		}
		if try == 3 {
			// No keeper runs: stop must not wait for one (it waited for ever, and the run
			// hung instead of saying why it could not start).
			close(w.done)
			_ = f.Sync()
			return fmt.Errorf("history: starting wrap %d: %w; the end of its log:\n%s", w.i, err, logTail(f.Name(), 2048))
		}
		fmt.Fprintf(w.log, "--- history: start %d failed: %v; again\n", try, err)
		w.port = 0
	}
	w.set(s)
	go w.keep(s)
	return nil
}

// logTail is the last n bytes of the file at path, or a word on why it cannot be read.
func logTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(fi.Size()-n, 0)
	b := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return err.Error()
	}
	return string(b)
}

func (w *wrapSlot) spawn() (proc, error) {
	env := []string{EnvChild + "=" + w.r.effect, EnvSlot + "=" + strconv.Itoa(w.i) + "." + strconv.Itoa(w.gen+1),
		"XDG_STATE_HOME=" + filepath.Join(w.r.cfg.Dir, "state"), "GORACE=atexit_sleep_ms=0"}
	fmt.Fprintf(w.log, "--- history: wrap %d generation %d at %d ms\n", w.i, w.gen+1, w.r.ms())
	var p proc
	var err error
	if w.r.cfg.Front == "http" {
		p, err = w.spawnHTTP(env)
	} else {
		p, err = mcpstdio.Start(context.Background(), mcpstdio.Config{
			Command: append(w.containerPrefix(), w.argv()...), Env: env, Stderr: w.log, InitTimeout: 30 * time.Second,
			Init: mcpstdio.DefaultInit("history-client", "1"),
		})
	}
	if err != nil || !w.r.contained(w.i) {
		return p, err
	}
	c, err := w.contain(p)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (w *wrapSlot) set(s proc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.setLocked(s)
}

func (w *wrapSlot) setLocked(s proc) {
	w.cur = s
	if s != nil {
		w.gen++
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// keep restarts the wrap each time it dies, until stop.
func (w *wrapSlot) keep(s proc) {
	defer close(w.done)
	for s != nil {
		<-s.Done()
		_ = s.Close() // reap
		w.set(nil)
		s = w.restart()
	}
}

// restart starts the next process and returns it, or nil once the slot is stopping.
func (w *wrapSlot) restart() proc {
	time.Sleep(200 * time.Millisecond)
	for !w.isClosing() {
		s, err := w.spawn()
		if err != nil {
			fmt.Fprintf(w.log, "--- history: restart failed: %v\n", err)
			time.Sleep(time.Second)
			continue
		}
		w.mu.Lock()
		if w.closing {
			w.mu.Unlock()
			_ = s.Close()
			return nil
		}
		w.setLocked(s) // under the lock, so a stop either sees it or prevents it
		w.mu.Unlock()
		return s
	}
	return nil
}

func (w *wrapSlot) isClosing() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closing
}

// session returns the live process and its generation, waiting while it restarts; nil once ctx
// ends or the slot is stopped.
func (w *wrapSlot) session(ctx context.Context) (proc, int) {
	for {
		w.mu.Lock()
		s, gen, ch, closing := w.cur, w.gen, w.changed, w.closing
		w.mu.Unlock()
		if closing {
			return nil, 0
		}
		if s != nil && s.Err() == nil {
			return s, gen
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *wrapSlot) pid() (int, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil || w.cur.Err() != nil {
		return 0, w.gen
	}
	return w.cur.Pid(), w.gen
}

// stop ends the slot: the wrap gets its orderly stop (stdin closed), and is not restarted.
func (w *wrapSlot) stop() {
	w.mu.Lock()
	w.closing = true
	s := w.cur
	w.mu.Unlock()
	if s != nil {
		_ = s.Close()
	}
	if w.log != nil {
		<-w.done
		w.log.Close()
	}
}

// spoolDir is where the wraps keep the outcomes their ledger did not take: beside a SQLite
// file, or under the wraps' state directory for PostgreSQL (every spool there is this run's).
func (r *run) spoolDir() string {
	if r.cfg.Ledger == "postgres" {
		return filepath.Join(r.cfg.Dir, "state", "effectfence", "spool")
	}
	return r.direct + ".spool"
}

// countSpooled counts the outcome files (*.json) in dir and the directories below it.
func countSpooled(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(d.Name(), ".json") {
			n++
		}
		return nil
	})
	return n
}

// stateHome guards XDG_STATE_HOME while withStateHome sets it.
var stateHome sync.Mutex

// withStateHome runs f with XDG_STATE_HOME set to dir, as the wraps have it, and restores it.
func withStateHome(dir string, f func() error) error {
	stateHome.Lock()
	defer stateHome.Unlock()
	old, had := os.LookupEnv("XDG_STATE_HOME")
	if err := os.Setenv("XDG_STATE_HOME", dir); err != nil {
		return err
	}
	defer func() {
		if had {
			os.Setenv("XDG_STATE_HOME", old)
		} else {
			os.Unsetenv("XDG_STATE_HOME")
		}
	}()
	return f()
}
