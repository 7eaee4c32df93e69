//go:build unix

// Package pgcluster starts private PostgreSQL clusters for tests whose adversary is the
// database server itself: killed with SIGKILL (the postmaster and every process it started, or
// one backend), restarted into crash recovery, replicated to a streaming standby and failed over
// to it. The shared test server (EFFECTFENCE_TEST_POSTGRES) is never touched: each cluster is
// initdb'd into a directory of its own, listens on 127.0.0.1 at a free port and is killed and
// removed when the test ends.
//
// The binaries are PostgreSQL's server binaries (initdb, postgres, pg_basebackup), found in
// EFFECTFENCE_TEST_PGBIN, else pg_config --bindir, else the newest /usr/lib/postgresql/*/bin.
// Without them the test is skipped with SKIP-REQUIRED (CI installs them with the server). As
// root (initdb refuses root) the server runs as the user postgres, else nobody.
//
// Every function takes a TB, which testing.TB satisfies; a program that is not a test (the
// history checker) passes a *Standalone instead and calls its functions through Catch.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/effectfence/effectfence/pkg/internal/procs"
)

// EnvBin names a directory holding initdb, postgres and pg_basebackup, when they are not where
// pg_config or /usr/lib/postgresql say.
const EnvBin = "EFFECTFENCE_TEST_PGBIN"

// TB is what the package needs of a test: testing.TB has it, and so does *Standalone for a
// program. Fatal, Fatalf and Skipf must not return (a test's end its goroutine; Standalone's
// panic, for Catch to recover).
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Cleanup(func())
}

// Cluster is one private PostgreSQL server: a data directory and the postmaster running on it.
type Cluster struct {
	tb   TB
	bin  string
	cred *syscall.Credential // the server's user, when the test runs as root
	// Dir holds the data directory, the server's log and its socket; owned by the server's user.
	Dir  string
	Data string
	Port int
	// started: the server has accepted connections once (its port is then the cluster's:
	// a store's URL names it).
	started bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	logf   *os.File
}

// Bin returns the directory of the server binaries, or skips the test with SKIP-REQUIRED.
func Bin(tb TB) string {
	tb.Helper()
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres", "pg_basebackup"} {
			if fi, err := os.Stat(filepath.Join(dir, b)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv(EnvBin); dir != "" {
		if !has(dir) {
			tb.Fatalf("%s=%s lacks initdb, postgres or pg_basebackup", EnvBin, dir)
		}
		return dir
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); has(dir) {
			return dir
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		if has(dir) {
			return dir
		}
	}
	tb.Skipf("SKIP-REQUIRED: PostgreSQL's server binaries (initdb, postgres, pg_basebackup) are not installed; set %s to their directory", EnvBin)
	return ""
}

func version(bindir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bindir)))
	return n
}

// serverUser is the credential the server runs under: nil unless the test runs as root.
func serverUser(tb TB) *syscall.Credential {
	tb.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			tb.Fatalf("initdb refuses to run as root, and there is no user postgres or nobody to run it as: %v", err)
		}
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		tb.Fatalf("user %s: uid %q gid %q", u.Username, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// newDir makes a directory for one cluster, owned by the server's user and removed when the
// test ends (t.TempDir's parents are private to the test's user, which the server is not).
func newDir(tb TB, cred *syscall.Credential) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "effectfence-pgcluster-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// freePort returns a TCP port on 127.0.0.1 nothing listens on now.
func freePort(tb TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// run runs one of the binaries as the server's user and fails the test if it fails.
func (c *Cluster) run(name string, args ...string) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		c.tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// New initdb's a cluster (trust authentication for local connections, replication included),
// writes settings (postgresql.conf lines, such as "synchronous_commit = off") into its
// configuration, and starts it. It is killed and removed when the test ends.
func New(tb TB, settings ...string) *Cluster {
	tb.Helper()
	c := newCluster(tb)
	c.run("initdb", "-D", c.Data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	c.configure(settings...)
	c.Start()
	return c
}

func newCluster(tb TB) *Cluster {
	tb.Helper()
	bin := Bin(tb)
	cred := serverUser(tb)
	dir := newDir(tb, cred)
	c := &Cluster{tb: tb, bin: bin, cred: cred, Dir: dir, Data: filepath.Join(dir, "data"), Port: freePort(tb)}
	tb.Cleanup(c.kill)
	return c
}

// configure appends settings to the data directory's postgresql.conf, after the ones every
// cluster here has: small, local, quick to start, its log on stderr (the Log file).
func (c *Cluster) configure(settings ...string) {
	c.tb.Helper()
	base := []string{
		"listen_addresses = '127.0.0.1'",
		fmt.Sprintf("port = %d", c.Port),
		fmt.Sprintf("unix_socket_directories = '%s'", c.Dir),
		"shared_buffers = 16MB",
		"max_connections = 60",
		"max_wal_senders = 4",
		"wal_level = replica",
		"hot_standby = on",
		"logging_collector = off",
		"log_min_messages = warning",
	}
	conf := filepath.Join(c.Data, "postgresql.conf")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		c.tb.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("\n" + strings.Join(append(base, settings...), "\n") + "\n"); err != nil {
		c.tb.Fatal(err)
	}
}

// Log is the path of the server's log (its stderr, every start appended).
func (c *Cluster) Log() string { return filepath.Join(c.Dir, "server.log") }

// LogText is the server's log so far, for failure messages.
func (c *Cluster) LogText() string {
	b, _ := os.ReadFile(c.Log())
	return string(b)
}

// Start starts the postmaster on the data directory (after a crash: crash recovery) and waits
// until it accepts connections, for up to two minutes. A first start whose port another
// process took since freePort chose it ("Address already in use": a parallel test's listener,
// seen in a full CI run) starts again on another port, up to four times.
func (c *Cluster) Start() {
	c.tb.Helper()
	for tries := 1; ; tries++ {
		if c.start(tries < 5 && !c.started) {
			return
		}
		c.Port = freePort(c.tb)
		c.configure()
	}
}

// start is one try of Start; with moveOn, a first start that finds its port taken reports
// false (the server exited; c.cmd cleared) instead of failing the test.
func (c *Cluster) start(moveOn bool) bool {
	c.tb.Helper()
	logged := len(c.LogText())
	c.mu.Lock()
	if c.cmd != nil {
		c.mu.Unlock()
		c.tb.Fatal("pgcluster: Start of a running cluster")
	}
	f, err := os.OpenFile(c.Log(), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.mu.Unlock()
		c.tb.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), "-D", c.Data)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		c.mu.Unlock()
		c.tb.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(exited) }()
	c.cmd, c.exited, c.logf = cmd, exited, f
	c.mu.Unlock()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn, err := pgx.Connect(ctx, c.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			cancel()
			c.started = true
			return true
		}
		cancel()
		select {
		case <-exited:
			if log := c.LogText(); moveOn && len(log) >= logged && strings.Contains(log[logged:], "Address already in use") {
				c.mu.Lock()
				c.cmd = nil
				c.mu.Unlock()
				return false
			}
			c.tb.Fatalf("pgcluster: the server exited while starting (%v); log:\n%s", err, c.LogText())
		default:
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("pgcluster: the server does not accept connections after two minutes (%v); log:\n%s", err, c.LogText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is the cluster's URL for database db (as the superuser postgres, no TLS), with params
// (key=value) added.
func (c *Cluster) URL(db string, params ...string) string {
	q := append([]string{"sslmode=disable"}, params...)
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?%s", c.Port, db, strings.Join(q, "&"))
}

// Addr is the server's host:port.
func (c *Cluster) Addr() string { return fmt.Sprintf("127.0.0.1:%d", c.Port) }

// Postmaster is the postmaster's pid, 0 when it is not running.
func (c *Cluster) Postmaster() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

// Crash kills the server as a power cut would kill its processes: the postmaster is stopped
// (so it forks nothing more), every process it started is sent SIGKILL, then the postmaster.
// Nothing is flushed or shut down; what the server acknowledged is what its WAL holds. Crash
// returns once the postmaster is gone; Start then runs crash recovery.
func (c *Cluster) Crash() {
	c.tb.Helper()
	c.kill()
}

func (c *Cluster) kill() {
	c.mu.Lock()
	cmd, exited := c.cmd, c.exited
	c.cmd = nil
	c.mu.Unlock()
	if cmd == nil {
		return
	}
	pm := cmd.Process.Pid
	_ = syscall.Kill(pm, syscall.SIGSTOP) // stopped, it starts no new child
	kids := procs.Children(pm, true)
	for _, pid := range kids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(pm, syscall.SIGKILL)
	<-exited
	// The children are reparented and reaped elsewhere; wait until none is left running (a
	// new postmaster refuses the data directory while one is attached to the old memory:
	// "pre-existing shared memory block is still in use"). They are the ones listed before
	// the kill: once the postmaster is gone, none is its child any more.
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range kids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// KillBackend sends SIGKILL to one server process (a backend serving a connection, found in
// pg_stat_activity): the postmaster then ends every other backend, runs crash recovery and
// accepts connections again by itself.
func (c *Cluster) KillBackend(pid int) {
	c.tb.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		c.tb.Fatalf("pgcluster: kill -9 %d: %v", pid, err)
	}
}

// alive: pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && len(b) > i+2 && b[i+2] != 'Z' && b[i+2] != 'X'
}

// Exec runs sql on database db of the cluster, failing the test on an error.
func (c *Cluster) Exec(db, sql string, args ...any) {
	c.tb.Helper()
	if err := c.TryExec(db, sql, args...); err != nil {
		c.tb.Fatalf("pgcluster: %s: %v", sql, err)
	}
}

// TryExec runs sql on database db of the cluster and returns its error.
func (c *Cluster) TryExec(db, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL(db))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// Query runs sql on database db and returns its rows' first columns as text.
func (c *Cluster) Query(db, sql string, args ...any) []string {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.URL(db))
	if err != nil {
		c.tb.Fatalf("pgcluster: %s: %v", sql, err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		c.tb.Fatalf("pgcluster: %s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		var s *string
		if err := r.Scan(&s); err != nil {
			return "", err
		}
		if s == nil {
			return "NULL", nil
		}
		return *s, nil
	})
	if err != nil {
		c.tb.Fatalf("pgcluster: %s: %v", sql, err)
	}
	return out
}

// Standby makes a streaming replica of c (pg_basebackup -R, WAL streamed during the copy),
// with settings added to its configuration, starts it (hot standby: it answers read-only
// queries) and waits until it streams from c. A synchronous standby is one c's
// synchronous_standby_names names ('*' names every standby): SetSynchronous.
func (c *Cluster) Standby(settings ...string) *Cluster {
	c.tb.Helper()
	s := newCluster(c.tb)
	s.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres",
		"-D", s.Data, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	s.configure(settings...)
	s.Start()
	deadline := time.Now().Add(time.Minute)
	for {
		if got := c.Query("postgres", "SELECT state FROM pg_stat_replication"); len(got) == 1 && got[0] == "streaming" {
			return s
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("pgcluster: the standby does not stream; its log:\n%s", s.LogText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SetSynchronous makes every standby of c synchronous (synchronous_standby_names = '*') or
// none (an empty list), and reloads c's configuration.
func (c *Cluster) SetSynchronous(on bool) {
	c.tb.Helper()
	names := ""
	if on {
		names = "*"
	}
	c.Exec("postgres", fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = '%s'", names))
	c.Exec("postgres", "SELECT pg_reload_conf()")
	want := "async"
	if on {
		want = "sync"
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if got := c.Query("postgres", "SELECT sync_state FROM pg_stat_replication"); len(got) == 1 && got[0] == want {
			return
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("pgcluster: the standby's sync_state is not %s", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Promote ends a standby's recovery (pg_promote) and waits until it accepts writes.
func (c *Cluster) Promote() {
	c.tb.Helper()
	if got := c.Query("postgres", "SELECT pg_promote(true, 60)::text"); len(got) != 1 || got[0] != "true" {
		c.tb.Fatalf("pgcluster: pg_promote answered %v; log:\n%s", got, c.LogText())
	}
	if got := c.Query("postgres", "SELECT pg_is_in_recovery()::text"); got[0] != "false" {
		c.tb.Fatalf("pgcluster: still in recovery after pg_promote; log:\n%s", c.LogText())
	}
}

// Stop sends SIGSTOP to every process of the server (the postmaster and its children: a
// standby that stops receiving and acknowledging WAL), Cont resumes them.
func (c *Cluster) Stop() { c.signalAll(syscall.SIGSTOP) }

// Cont resumes a server stopped by Stop.
func (c *Cluster) Cont() { c.signalAll(syscall.SIGCONT) }

func (c *Cluster) signalAll(sig syscall.Signal) {
	c.tb.Helper()
	pm := c.Postmaster()
	if pm == 0 {
		c.tb.Fatal("pgcluster: the server is not running")
	}
	var errs []error
	if sig == syscall.SIGSTOP {
		// The postmaster first, so it forks nothing after its children were listed.
		errs = append(errs, syscall.Kill(pm, sig))
	}
	for _, pid := range procs.Children(pm, true) {
		errs = append(errs, syscall.Kill(pid, sig))
	}
	if sig != syscall.SIGSTOP {
		errs = append(errs, syscall.Kill(pm, sig))
	}
	if err := errors.Join(errs...); err != nil {
		c.tb.Fatalf("pgcluster: %v: %v", sig, err)
	}
}
