package sqlite_test

import (
	"bufio"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// copyV1 copies testdata/ledger-v1.db, a ledger written by the build before schema 2 (done,
// failed, in-flight and released intents, domains, a 70 KB result, counters, events), to a
// temporary file.
func copyV1(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "ledger-v1.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ledger.db")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ledgerSnap is everything a store shows through fence.Tx.
type ledgerSnap struct {
	Records  map[string]string
	Events   []fence.Event
	Counters fence.Counters
	Domains  map[string]uint64
	Floor    uint64
	// ByState lists the intents a Scan by state (and by expiry, under "expiring") finds: the
	// queries that each schema serves from other indexes.
	ByState map[string][]string
}

func snapshot(t *testing.T, st fence.Store) ledgerSnap {
	t.Helper()
	s := ledgerSnap{Records: map[string]string{}, Domains: map[string]uint64{}, ByState: map[string][]string{}}
	err := st.View(ctx, func(tx fence.Tx) error {
		err := tx.Scan(fence.Filter{}, func(r *fence.Record) bool {
			b, _ := json.Marshal(r)
			s.Records[r.Intent] = string(b)
			return true
		})
		if err != nil {
			return err
		}
		for _, f := range []fence.Filter{
			{States: []fence.State{fence.StateInFlight}},
			{States: []fence.State{fence.StateFailed, fence.StateUnknown}},
			{States: []fence.State{fence.StateDone}},
			{States: []fence.State{fence.StateDone}, ExpiresBefore: time.Now().Add(100 * 365 * 24 * time.Hour)},
		} {
			key := fmt.Sprint(f.States)
			if !f.ExpiresBefore.IsZero() {
				key = "expiring"
			}
			s.ByState[key] = []string{}
			err := tx.Scan(f, func(r *fence.Record) bool { s.ByState[key] = append(s.ByState[key], r.Intent); return true })
			if err != nil {
				return err
			}
		}
		if err := tx.Events("", func(ev fence.Event) bool { s.Events = append(s.Events, ev); return true }); err != nil {
			return err
		}
		if s.Counters, err = tx.Counters(); err != nil {
			return err
		}
		for _, d := range []string{"acct:0", "acct:1", "acct:2"} {
			if s.Domains[d], _, err = tx.DomainSeq(d); err != nil {
				return err
			}
		}
		s.Floor, err = tx.DomainFloor()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func checkT(t *testing.T, path string) *sqlite.CheckReport {
	t.Helper()
	rep, err := sqlite.Check(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A version-1 ledger is read as it is by a read-only open, migrated in place by the first open
// for writing, and shows the same records, events, counters and domains afterwards; the engine
// replays its done intents with their recorded certs and goes on admitting new ones.
func TestMigrateFromV1(t *testing.T) {
	path := copyV1(t)
	rep := checkT(t, path)
	if !rep.OK || rep.SchemaVersion != 1 || rep.RecordsLayout != "without rowid" || rep.States["done"] != 25 {
		t.Fatalf("check of the v1 file: %+v", rep)
	}
	if !strings.Contains(strings.Join(rep.Advice, "\n"), "migrated in place the next time a process opens it for writing") {
		t.Errorf("check does not say the file will be migrated: %q", rep.Advice)
	}

	ro := openT(t, path, sqlite.Options{ReadOnly: true})
	before := snapshot(t, ro)
	if len(before.Records) != 35 || len(before.Events) != 10 || before.Counters.Admitted != 40 || before.Domains["acct:0"] == 0 ||
		len(before.ByState["[in_flight]"]) == 0 || len(before.ByState["[failed unknown]"]) == 0 || len(before.ByState["expiring"]) != 25 {
		t.Fatalf("read-only view of the v1 file: %d records, %d events, %+v, %v, %v", len(before.Records), len(before.Events), before.Counters, before.Domains, before.ByState)
	}
	var oldCert *fence.Record
	if err := ro.View(ctx, func(tx fence.Tx) (err error) { oldCert, err = tx.Get("gen:009"); return err }); err != nil || oldCert == nil || oldCert.Cert == nil {
		t.Fatalf("gen:009 in the v1 file: %+v %v", oldCert, err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	// The v1 file was written on 2026-11-30 at 15:04 UTC with the default result TTL of 24 h:
	// its done outcomes expire on 2026-12-01 at 15:04 and would no longer be replayed after
	// that. The migrated store runs on a clock of the file's own day, moving as time does.
	v1Day, start := time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC), time.Now()
	st := openT(t, path, sqlite.Options{Now: func() time.Time { return v1Day.Add(time.Since(start)) }})
	after := snapshot(t, st)
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the migration changed what the ledger holds:\nbefore %+v\nafter  %+v", before, after)
	}
	rep = checkT(t, path)
	if !rep.OK || rep.SchemaVersion != sqlite.SchemaVersion || rep.RecordsLayout != "rowid" || rep.States["done"] != 25 || rep.Events != 10 {
		t.Fatalf("check of the migrated file: %+v", rep)
	}
	byHash := ""
	err := st.View(ctx, func(tx fence.Tx) error {
		r, err := tx.CertByHash(oldCert.Cert.Hash)
		if r != nil {
			byHash = r.Intent
		}
		return err
	})
	if err != nil || byHash != "gen:009" {
		t.Fatalf("CertByHash after the migration: %q %v", byHash, err)
	}

	eng := fence.New(st, fence.Config{})
	// gen:009 was committed with a 70 KB result: its replay is the recorded cert.
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "gen:009", Tool: "charge_card", Args: oldCert.Args, Agent: "gen"})
	if err != nil || adm.Fresh() || adm.Cert.Hash != oldCert.Cert.Hash {
		t.Fatalf("replay of a v1 done intent after migration: %+v %v", adm, err)
	}
	adm, err = eng.Prepare(ctx, fence.Request{Intent: "after:1", Tool: "charge_card", Args: []byte(`{"n":1}`), Domain: "acct:0"})
	if err != nil || !adm.Fresh() {
		t.Fatalf("fresh admission after migration: %+v %v", adm, err)
	}
	if adm.Ticket.Token != 41 || adm.Ticket.Seq != before.Domains["acct:0"]+1 {
		t.Errorf("the token or domain counter did not carry over: token %d seq %d (v1: token 40, acct:0 at %d)", adm.Ticket.Token, adm.Ticket.Seq, before.Domains["acct:0"])
	}
	if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`)); err != nil {
		t.Fatal(err)
	}
	eng.Close()

	// Opening again finds the current schema and changes nothing.
	st2 := openT(t, path, sqlite.Options{})
	if n := len(snapshot(t, st2).Records); n != 36 {
		t.Fatalf("%d records on reopening; want 36", n)
	}
}

// growV1 adds n version-1 records with 1.1 KB bodies to a v1 file through SQL alone, so that
// its migration writes more than SQLite's page cache holds (and spills to the WAL before its
// commit).
func growV1(t *testing.T, path string, n int) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO records(intent, state, expires_at, cert_hash, body)
		SELECT printf('bulk:%06d', i), 'failed', NULL, NULL,
			CAST(json_object('intent', printf('bulk:%06d', i), 'state', 'failed', 'fingerprint', 'fp', 'token', 0,
				'tool', 'bulk', 'args', json_object('memo', hex(zeroblob(550))), 'reason', 'bulk') AS BLOB)
		FROM n`, n)
	if err != nil {
		t.Fatal(err)
	}
}

// migrateChild is a process that opens the ledger for writing (migrating it). With
// EFFECTFENCE_TEST_MIGRATE_STOP set it stops inside the migration's transaction, after the
// copy, says "migrating" and waits to be killed.
func migrateChild(path string) error {
	if stop := os.Getenv("EFFECTFENCE_TEST_MIGRATE_STOP"); stop != "" {
		at, err := strconv.Atoi(stop)
		if err != nil {
			return err
		}
		sqlite.SetTestHookMigrated(func(from int) {
			if from == at {
				fmt.Println("migrating")
				time.Sleep(time.Hour)
			}
		})
	}
	fmt.Println("opening")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		return err
	}
	fmt.Println("open")
	return st.Close()
}

func startMigrator(t *testing.T, path string, stop bool) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	at := -1
	if stop {
		at = 1
	}
	return startMigratorAt(t, path, at)
}

// startMigratorAt is startMigrator for a process that stops after the migration from schema
// version from (none when from < 0).
func startMigratorAt(t *testing.T, path string, from int) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	env := []string{"EFFECTFENCE_TEST_MIGRATOR=" + path}
	if from >= 0 {
		env = append(env, "EFFECTFENCE_TEST_MIGRATE_STOP="+strconv.Itoa(from))
	}
	cmd, _, out := startSelf(t, env)
	return cmd, out
}

func kill9(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the migrating process was not killed by SIGKILL: %v", err)
	}
}

// afterCrash checks a ledger whose migrating process was killed: `ledger check` finds it
// healthy at version 1 or the current one, it opens read-only as it is with every record, and
// an open for writing completes the migration with every record.
func afterCrash(t *testing.T, path string, want ledgerSnap) (version int) {
	t.Helper()
	rep := checkT(t, path)
	if !rep.OK || (rep.SchemaVersion != 1 && rep.SchemaVersion != sqlite.SchemaVersion) {
		t.Fatalf("check after the kill: %+v", rep)
	}
	ro, err := sqlite.Open(ctx, path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open after the kill: %v", err)
	}
	got := snapshot(t, ro)
	ro.Close()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after the kill the ledger holds %d records (want %d), or other differences", len(got.Records), len(want.Records))
	}
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatalf("open for writing after the kill: %v", err)
	}
	got = snapshot(t, st)
	st.Close()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after the migration the ledger holds %d records (want %d), or other differences", len(got.Records), len(want.Records))
	}
	if rep := checkT(t, path); !rep.OK || rep.SchemaVersion != sqlite.SchemaVersion || rep.RecordsLayout != "rowid" {
		t.Fatalf("check after the completed migration: %+v", rep)
	}
	return rep.SchemaVersion
}

// kill -9 of a process in the middle of migrating a ledger (the copy done, partly spilled into
// the WAL, not committed) leaves a ledger that opens as version 1 with every record, and the
// next open for writing migrates it.
func TestMigrationKilledMidway(t *testing.T) {
	t.Parallel()
	path := copyV1(t)
	growV1(t, path, 6000)
	ro := openT(t, path, sqlite.Options{ReadOnly: true})
	want := snapshot(t, ro)
	ro.Close()

	cmd, out := startMigrator(t, path, true)
	for out.Scan() && out.Text() != "migrating" {
	}
	if out.Text() != "migrating" {
		cmd.Wait()
		t.Fatal("the migrating process ended before it reached the migration")
	}
	wi, err := os.Stat(path + "-wal")
	if err != nil || wi.Size() < 1<<20 {
		t.Fatalf("the migration has not spilled into the WAL (%v, %v): the kill would not test recovery from a partial write", wi, err)
	}
	kill9(t, cmd)
	if v := afterCrash(t, path, want); v != 1 {
		t.Fatalf("the killed migration left version %d; want 1 (nothing committed)", v)
	}
}

// kill -9 at arbitrary moments of the open (before, during or after the migration) always
// leaves a ledger that opens with every record. The moments are spread over the time an
// uninterrupted open of the same ledger takes, measured first: a fixed window put every kill
// after the migration on a fast build and every kill before its commit under -race.
func TestMigrationKilledAnywhere(t *testing.T) {
	t.Parallel()
	template := copyV1(t)
	growV1(t, template, 2000)
	raw, err := os.ReadFile(template)
	if err != nil {
		t.Fatal(err)
	}
	ro := openT(t, template, sqlite.Options{ReadOnly: true})
	want := snapshot(t, ro)
	ro.Close()
	fresh := func() string {
		path := filepath.Join(t.TempDir(), "ledger.db")
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cmd, out := startMigrator(t, fresh(), false)
	if !out.Scan() || out.Text() != "opening" {
		t.Fatal("the migrating process did not start")
	}
	began := time.Now()
	if !out.Scan() || out.Text() != "open" {
		t.Fatal("the uninterrupted migration did not finish")
	}
	took := time.Since(began)
	cmd.Wait()
	versions := map[int]int{}
	for round := range 4 {
		path := fresh()
		cmd, out := startMigrator(t, path, false)
		if !out.Scan() || out.Text() != "opening" {
			t.Fatal("the migrating process did not start")
		}
		// Round r kills at a random moment of the r-th third of the measured open (the
		// fourth: after it).
		time.Sleep(took * time.Duration(round*100+rand.IntN(100)) / 300)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		rep := checkT(t, path)
		versions[rep.SchemaVersion]++
		t.Logf("round %d: killed at schema version %d", round, rep.SchemaVersion)
		afterCrash(t, path, want)
	}
	t.Logf("an uninterrupted open took %v; kills by the schema version they left: %v", took, versions)
}
