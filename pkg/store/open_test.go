package store_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/pgtest"
	"github.com/effectfence/effectfence/pkg/store"
)

var ctx = context.Background()

func TestOpenLocations(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	cases := []struct {
		o    store.Options
		want string
	}{
		{store.Options{Name: "server"}, filepath.Join(state, "effectfence", "server.db")},
		{store.Options{Name: "server", Ledger: filepath.Join(state, "mine.db")}, filepath.Join(state, "mine.db")},
		{store.Options{Name: "server", Ledger: "memory"}, "memory"},
	}
	for _, tc := range cases {
		l, err := store.Open(ctx, tc.o)
		if err != nil {
			t.Fatalf("open %+v: %v", tc.o, err)
		}
		if l.Location != tc.want {
			t.Errorf("open %+v: location %s; want %s", tc.o, l.Location, tc.want)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if tc.want != "memory" {
			if _, err := os.Stat(tc.want); err != nil {
				t.Errorf("open %+v made no file: %v", tc.o, err)
			}
		}
	}
	// A PostgreSQL ledger nobody listens for (a closed port on loopback): a clear error that
	// never shows the password.
	_, err := store.Open(ctx, store.Options{Ledger: "postgres://u:secret@127.0.0.1:1/x?connect_timeout=2"})
	if err == nil || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("unreachable postgres ledger: %v", err)
	}
}

// The ledger is a durable default: what one Ledger committed, the next one replays.
func TestOpenIsDurable(t *testing.T) {
	o := store.Options{Ledger: filepath.Join(t.TempDir(), "l.db")}
	l, err := store.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	r := fence.Request{Intent: "charge:1", Tool: "charge", Args: []byte(`{"amount":1}`)}
	adm, err := l.Prepare(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := l.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, err = store.Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	adm, err = l.Prepare(ctx, r)
	if err != nil || adm.Fresh() || adm.Cert.Hash != cert.Hash {
		t.Fatalf("after reopen: %+v %v; want replay of %s", adm, err, cert.Hash)
	}
}

func fileSize(t *testing.T, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A steady stream of distinct intents whose outcomes expire: the background sweep keeps the
// file from growing. Each round commits a batch of fresh intents, waits until the Ledger's own
// sweeper (not the test) has dropped them, and measures the files. Without the sweep the
// database file would hold every record ever written, several times its plateau. The WAL is
// bounded separately: SQLite checkpoints it every 1000 pages and the store truncates it to
// 4 MiB (journal_size_limit).
func TestFileStaysBoundedUnderSteadyStream(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	l, err := store.Open(ctx, store.Options{Ledger: path, ResultTTL: 50 * time.Millisecond, SweepEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const rounds, perRound, workers = 9, 80, 16
	pad := strings.Repeat("p", 8000)
	var sizes, wals []int64
	written := 0
	for round := range rounds {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := w; i < perRound; i += workers {
					args := fmt.Sprintf(`{"round":%d,"i":%d,"pad":%q}`, round, i, pad)
					adm, err := l.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("stream:%d:%d", round, i), Tool: "send", Args: []byte(args)})
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := l.Commit(ctx, *adm.Ticket, []byte(args)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		written += perRound * 3 * len(pad) // args, cert args, cert result
		waitSwept(t, l)
		sizes = append(sizes, fileSize(t, path))
		wals = append(wals, fileSize(t, path+"-wal"))
	}
	t.Logf("database bytes after each round: %v, WAL bytes: %v (record bytes written: %d)", sizes, wals, written)
	for i, n := range wals {
		if n > 8<<20 {
			t.Errorf("after round %d the WAL is %d bytes; checkpoints should keep it near 4 MiB", i, n)
		}
	}
	// A round whose records the checkpoint moves into the file before the sweep has freed the
	// round before's pages adds a round's worth once (seen at 1.56 times the plateau on a
	// loaded machine). A file that kept every record would hold 7 to 9 rounds' worth in the
	// last three rounds against the plateau's 3: over twice it.
	plateau := sizes[2]
	for i, n := range sizes[6:] {
		if n > 2*plateau {
			t.Errorf("after round %d the ledger is %d bytes; it plateaued at %d after round 2 (grows without bound?)", i+6, n, plateau)
		}
	}
	if int64(written) < 3*sizes[len(sizes)-1] {
		t.Fatalf("the stream wrote only %d record bytes against a %d-byte ledger: too little to show a bound", written, sizes[len(sizes)-1])
	}
}

// waitSwept waits until no done record is left (the sweeper runs every 20 ms).
func waitSwept(t *testing.T, l *store.Ledger) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := 0
		err := l.Store().View(ctx, func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: []fence.State{fence.StateDone}}, func(*fence.Record) bool { left++; return true })
		})
		if err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d done records still there 30 s after they expired: the background sweep does not run", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 12 item 10: strings that name no supported ledger are refused with the supported
// forms, never turned into a SQLite file under the working directory.
func TestLedgerStringsThatAreNotLedgers(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	for _, s := range []string{"Postgres://u@h/db", "POSTGRESQL://h/db", "pg://h/db", "redis://localhost:6379", "sqlite:///x.db",
		"file:/x.db", "file:x.db", "Memory", "MEMORY", "~/l.db", "~", "~bob/l.db", " memory", "ledger.db ", "mysql://h/db",
		// libpq's key=value form, which pgx reads, is no ledger form here: it became a file
		// named after the connection string, password and all.
		"host=127.0.0.1 dbname=test", "host=h password=secret dbname=d", "dbname=test", "user = postgres host=h",
		// Environment variables a shell did not expand (an MCP config's env, a policy file):
		// the ledger was a directory named $HOME under the working directory.
		"$HOME/l.db", "${HOME}/l.db", "$XDG_STATE_HOME/effectfence/l.db",
		// Only a policy file can give a NUL (as "\u0000"): wrap stopped at start with "invalid argument".
		"a\x00b.db", "/var/lib/l.db\x00",
		// A URL whose scheme lost its colon: wrap used a SQLite file postgres/u:secret@h/db
		// under the working directory (each host its own, not the shared ledger) and logged
		// the string, password and all.
		"postgres//u:secret@h/db", "postgresql//h/db", "Postgres//u@h/db"} {
		_, err := store.Open(ctx, store.Options{Ledger: s})
		if err == nil || !strings.Contains(err.Error(), "supported forms") {
			t.Errorf("ledger %q: want a refusal naming the supported forms, got %v", s, err)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("ledger %q: the refusal shows the password: %v", s, err)
		} else if strings.Contains(err.Error(), "e.g. $HOME") {
			t.Errorf("ledger %q: the refusal advises $HOME, which is expanded no more than ~: %v", s, err)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("refused ledgers left files behind: %v", ents)
	}
	for _, s := range []string{"l.db", "./a:b.db", filepath.Join(dir, "x.db"), "memory", "./host=h.db", "a=b.db"} {
		if err := store.CheckLedger(s); err != nil {
			t.Errorf("ledger %q refused: %v", s, err)
		}
	}
}

// The background recovery of an open ledger says when it fails (the database is cut) and when
// it works again, once each, never silently.
func TestBackgroundRecoveryFailuresAreLogged(t *testing.T) {
	ledger := pgtest.Ledger(t, "store_bglog")
	u, err := url.Parse(ledger)
	if err != nil {
		t.Fatal(err)
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "5432")
	}
	cut, err := netcut.New(host)
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close()
	u.Host = cut.Addr()
	u.User = url.UserPassword(u.User.Username(), "s3cret-pw") // trust auth ignores it
	var log syncbuf.Buffer
	led, err := store.Open(context.Background(), store.Options{Ledger: u.String(), Log: &log, RecoverEvery: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	cut.Cut(3 * time.Second)
	waitFor(t, &log, "background recovery (spool drain and lease rules) failed")
	cut.Heal()
	waitFor(t, &log, "background recovery (spool drain and lease rules) works again")
	// Counted by the log's own words: the error it quotes may say "failed" too (pgx's
	// "failed to connect" when every connection of the pool was found dead and a new one
	// could not be made).
	if n := strings.Count(log.String(), "background recovery (spool drain and lease rules) failed"); n != 1 {
		t.Fatalf("a lasting failure logged %d times, want once:\n%s", n, log.String())
	}
	if strings.Contains(log.String(), "s3cret-pw") {
		t.Fatalf("the log shows credentials: %s", log.String())
	}
}

// The background recovery's log reads a lasting failure as one, though the driver's error
// names another local port on every try (CI saw one cut logged three times: "read tcp
// 127.0.0.1:42138->…", "…:42214->…", "…:42238->…"), and still logs another cause.
func TestLastingFailureIsOneLine(t *testing.T) {
	a := "postgres ledger: no connection: failed to connect to `user=postgres database=test`: 127.0.0.1:41535 (127.0.0.1): failed to receive message: read tcp 127.0.0.1:42138->127.0.0.1:41535: read: connection reset by peer"
	b := strings.NewReplacer("42138", "42214").Replace(a)
	if store.WithoutDigits(a) != store.WithoutDigits(b) {
		t.Fatalf("two tries of one cut read as two failures:\n%s\n%s", store.WithoutDigits(a), store.WithoutDigits(b))
	}
	other := "postgres ledger: no connection: dial tcp 127.0.0.1:41535: connect: connection refused"
	if store.WithoutDigits(a) == store.WithoutDigits(other) || store.WithoutDigits("") != "" {
		t.Fatal("another cause reads as the same failure")
	}
}

func waitFor(t *testing.T, log *syncbuf.Buffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("never logged %q; log:\n%s", want, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A ledger opened with SweepInBackground (wrap, serve) is answered at once, before its backlog
// of expired outcomes is dropped, and its own goroutine then drops them; opened without it
// (the ledger commands), it returns with them gone.
func TestSweepInBackground(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	const expired = 3
	expire := func() {
		l, err := store.Open(ctx, store.Options{Ledger: path, ResultTTL: 50 * time.Millisecond, SweepEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for i := range expired {
			adm, err := l.Prepare(ctx, fence.Request{Intent: fmt.Sprintf("old:%d", i), Tool: "send", Args: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Commit(ctx, *adm.Ticket, []byte(`"sent"`)); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // past the 50 ms they are kept
	}
	done := func(l *store.Ledger) int {
		n := 0
		err := l.Store().View(ctx, func(tx fence.Tx) error {
			return tx.Scan(fence.Filter{States: []fence.State{fence.StateDone}}, func(*fence.Record) bool { n++; return true })
		})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	expire()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	defer store.SetTestHookFirstSweep(func() { close(entered); <-release })()
	l, err := store.Open(ctx, store.Options{Ledger: path, ResultTTL: 50 * time.Millisecond, SweepEvery: time.Hour, SweepInBackground: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	defer let() // before Close, which waits for the goroutine the hook holds
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("no sweep began in the background within 30 s of Open")
	}
	if n := done(l); n != expired {
		t.Fatalf("Open with SweepInBackground returned with %d of %d expired outcomes left: it swept before answering", n, expired)
	}
	let()
	waitSwept(t, l) // the background goroutine's first sweep, not the hourly one
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	expire()
	l, err = store.Open(ctx, store.Options{Ledger: path, ResultTTL: 50 * time.Millisecond, SweepEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if n := done(l); n != 0 {
		t.Fatalf("Open without SweepInBackground returned with %d expired outcomes left", n)
	}
}
