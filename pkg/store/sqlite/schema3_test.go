package sqlite_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// copyV2 makes a ledger of schema 2 (as a build of schema 2 leaves it) from the v1 file,
// with n more records whose 1.1 KB arguments this build would store apart.
func copyV2(t *testing.T, n int) string {
	t.Helper()
	path := copyV1(t)
	if n > 0 {
		growV1(t, path, n)
	}
	if err := sqlite.MakeV2(ctx, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// rawBodies reads every records row's body as the file holds it.
func rawBodies(t *testing.T, path string) map[string][]byte {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT intent, body FROM records")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]byte{}
	for rows.Next() {
		var intent string
		var body []byte
		if err := rows.Scan(&intent, &body); err != nil {
			t.Fatal(err)
		}
		out[intent] = body
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func countArgs(t *testing.T, path string) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM record_args").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A schema-2 ledger is read as it is by a read-only open, and upgraded in place by the first
// open for writing, which rewrites no record: every body stays byte for byte, and the store
// shows the same records, events, counters and domains. Records written after are split
// when their arguments are large, read back as written, and leave record_args when deleted
// or rewritten whole.
func TestMigrateFromV2(t *testing.T) {
	path := copyV2(t, 40)
	rep := checkT(t, path)
	if !rep.OK || rep.SchemaVersion != 2 || rep.RecordsLayout != "rowid" || rep.States["done"] != 25 {
		t.Fatalf("check of the v2 file: %+v", rep)
	}
	ro := openT(t, path, sqlite.Options{ReadOnly: true})
	before := snapshot(t, ro)
	if len(before.Records) != 75 {
		t.Fatalf("read-only view of the v2 file: %d records", len(before.Records))
	}
	ro.Close()
	raw := rawBodies(t, path)

	st := openT(t, path, sqlite.Options{})
	if after := snapshot(t, st); !reflect.DeepEqual(before, after) {
		t.Fatalf("the migration changed what the ledger holds")
	}
	if got := rawBodies(t, path); !reflect.DeepEqual(got, raw) {
		t.Fatal("the migration rewrote record bodies")
	}
	rep = checkT(t, path)
	if !rep.OK || rep.SchemaVersion != sqlite.SchemaVersion || rep.States["done"] != 25 {
		t.Fatalf("check of the migrated file: %+v", rep)
	}

	// New records: large arguments are split, small ones are not; each reads back as the
	// record put, through Get, Scan and CertByHash.
	eng := fence.New(st, fence.Config{})
	defer eng.Close()
	big := []byte(fmt.Sprintf(`{"memo":%q,"note":",\"args\":{\"cert\":1}"}`, strings.Repeat("y", 3000)))
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "big:1", Tool: "t", Args: big, ExactArgs: append([]byte(" "), big...)})
	if err != nil || !adm.Fresh() {
		t.Fatalf("%+v %v", adm, err)
	}
	rec, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if adm, err := eng.Prepare(ctx, fence.Request{Intent: "small:1", Tool: "t", Args: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	} else if _, err := eng.Commit(ctx, *adm.Ticket, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	bodies := rawBodies(t, path)
	if !sqlite.IsSplit(bodies["big:1"]) || sqlite.IsSplit(bodies["small:1"]) {
		t.Fatalf("split: big %v, small %v", sqlite.IsSplit(bodies["big:1"]), sqlite.IsSplit(bodies["small:1"]))
	}
	var got, byHash *fence.Record
	var scanned *fence.Record
	err = st.View(ctx, func(tx fence.Tx) error {
		if got, err = tx.Get("big:1"); err != nil {
			return err
		}
		if byHash, err = tx.CertByHash(rec.Hash); err != nil {
			return err
		}
		return tx.Scan(fence.Filter{}, func(r *fence.Record) bool {
			if r.Intent == "big:1" {
				scanned = r
			}
			return true
		})
	})
	if err != nil || got == nil || byHash == nil || scanned == nil {
		t.Fatalf("reading big:1: %v %v %v %v", got, byHash, scanned, err)
	}
	for _, r := range []*fence.Record{got, byHash, scanned} {
		if !bytes.Equal(r.Args, big) || !bytes.Equal(r.ExactArgs, append([]byte(" "), big...)) || r.Cert == nil || !bytes.Equal(r.Cert.Args, big) || r.Cert.Hash != rec.Hash {
			t.Fatalf("big:1 read back as %+v", r)
		}
	}
	if n := countArgs(t, path); n != 1 {
		t.Fatalf("record_args holds %d rows, want 1", n)
	}
	// A reopened store (no cache) reads the same record.
	st2 := openT(t, path, sqlite.Options{ReadOnly: true})
	err = st2.View(ctx, func(tx fence.Tx) error {
		r, err := tx.Get("big:1")
		if err == nil && !reflect.DeepEqual(r, got) {
			err = fmt.Errorf("another store reads %+v, want %+v", r, got)
		}
		return err
	})
	st2.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Deleting the record takes its arguments along.
	if err := st.Update(ctx, func(tx fence.Tx) error { return tx.Delete("big:1") }); err != nil {
		t.Fatal(err)
	}
	if n := countArgs(t, path); n != 0 {
		t.Fatalf("record_args holds %d rows after the record went, want 0", n)
	}
	if rep := checkT(t, path); !rep.OK {
		t.Fatalf("check: %+v", rep)
	}
}

// kill -9 of a process in the middle of the 2 -> 3 migration (its tables made, the version
// not yet committed) leaves schema 2 as it was: `ledger check` finds it healthy at version 2,
// a read-only open reads every record, no body changed and there is no record_args; the next
// open for writing migrates it.
func TestMigrationV2KilledMidway(t *testing.T) {
	path := copyV2(t, 20)
	ro := openT(t, path, sqlite.Options{ReadOnly: true})
	want := snapshot(t, ro)
	ro.Close()
	raw := rawBodies(t, path)

	cmd, out := startMigratorAt(t, path, 2)
	for out.Scan() && out.Text() != "migrating" {
	}
	if out.Text() != "migrating" {
		cmd.Wait()
		t.Fatal("the migrating process ended before it reached the migration from schema 2")
	}
	kill9(t, cmd)
	if rep := checkT(t, path); !rep.OK || rep.SchemaVersion != 2 {
		t.Fatalf("check after the kill: %+v", rep)
	}
	ro = openT(t, path, sqlite.Options{ReadOnly: true})
	got := snapshot(t, ro)
	ro.Close()
	if !reflect.DeepEqual(got, want) {
		t.Fatal("after the kill the ledger reads otherwise")
	}
	if !reflect.DeepEqual(rawBodies(t, path), raw) {
		t.Fatal("after the kill a record body changed")
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	var n int
	err = db.QueryRow("SELECT count(*) FROM sqlite_schema WHERE name LIKE 'record%args%'").Scan(&n)
	db.Close()
	if err != nil || n != 0 {
		t.Fatalf("after the kill the file has %d objects of schema 3 (%v)", n, err)
	}
	st := openT(t, path, sqlite.Options{})
	got = snapshot(t, st)
	st.Close()
	if !reflect.DeepEqual(got, want) {
		t.Fatal("after the completed migration the ledger reads otherwise")
	}
	if rep := checkT(t, path); !rep.OK || rep.SchemaVersion != sqlite.SchemaVersion {
		t.Fatalf("check after the completed migration: %+v", rep)
	}
}
