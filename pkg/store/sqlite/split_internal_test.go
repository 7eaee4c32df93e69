package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A commit of a claim with large arguments does not write them again: no page of
// record_args is in its transaction, and it writes a few pages where it wrote the arguments'
// overflow chain again (20 for a 64 KB record, whose claim wrote 13). The mean frames of a
// claim's and of a commit's transaction are logged by the size of the arguments (the done
// record holds them twice: 0, 200, 1700 and 32000 bytes of memo make about the 0.5, 1.1, 4 and
// 64 KB records of BenchmarkAdmitCommit; 1700 bytes stay whole, below splitMin).
func TestCommitKeepsArguments(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 200, 1700, 4000, 32000} {
		claim, commit, commits := claimCommitFrames(t, size)
		t.Logf("memo %d bytes: %.1f frames per claim, %.1f per commit", size, claim, commit)
		if size < splitMin {
			continue
		}
		for _, c := range commits {
			if slices.Contains(c, "record_args") {
				t.Fatalf("a commit wrote a page of record_args: %v", c)
			}
		}
		if commit > 5 {
			t.Fatalf("a commit at memo %d bytes wrote %.1f pages; its arguments again? %v", size, commit, commits)
		}
	}
}

// claimCommitFrames admits and commits intents whose args hold a memo of size bytes, and
// returns the mean WAL frames of a claim's and of a commit's transaction over 20 decisions,
// and the pages each commit wrote.
func claimCommitFrames(t *testing.T, size int) (claim, commit float64, commits [][]string) {
	t.Helper()
	path, eng := newLedger(t)
	args := []byte(fmt.Sprintf(`{"memo":%q}`, strings.Repeat("x", size)))
	for i := range 100 {
		decide(t, eng, fmt.Sprintf("warm:%04d", i), args)
	}
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	owners := map[uint32]string{}
	rows, err := db.Query("SELECT name, pageno FROM dbstat")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var page uint32
		if err := rows.Scan(&name, &page); err != nil {
			t.Fatal(err)
		}
		owners[page] = name
	}
	rows.Close()
	const n = 20
	for i := range n {
		decide(t, eng, fmt.Sprintf("x:%04d", i), args)
	}
	var txns [][]string
	var cur []string
	for _, p := range walPages(t, path, owners) {
		if p == "|commit" {
			txns = append(txns, cur)
			cur = nil
			continue
		}
		cur = append(cur, p)
	}
	if len(txns) != 2*n {
		t.Fatalf("%d transactions in the WAL, want %d claims and their commits", len(txns), n)
	}
	var claims, dones int
	for i, tx := range txns {
		if i%2 == 0 {
			claims += len(tx)
		} else {
			dones += len(tx)
			commits = append(commits, tx)
		}
	}
	return float64(claims) / n, float64(dones) / n, commits
}

// A split body whose arguments are gone or are not the ones it names reads as an unreadable
// record (no panic, no other record), and `ledger check` names it.
func TestSplitRecordDamaged(t *testing.T) {
	for _, damage := range []string{
		"DELETE FROM record_args",
		"UPDATE record_args SET bytes = x'00'",
		"UPDATE records SET body = substr(body, 1, 40) WHERE intent = 'big:1'",
		"UPDATE records SET body = x'00' WHERE intent = 'big:1'",
	} {
		t.Run(damage, func(t *testing.T) {
			path, eng := newLedger(t)
			decide(t, eng, "big:1", []byte(fmt.Sprintf(`{"memo":%q}`, strings.Repeat("z", 4000))))
			eng.Close()
			db, err := sql.Open("sqlite", "file:"+path)
			if err != nil {
				t.Fatal(err)
			}
			// The trigger takes record_args along with a whole body only: these edits keep
			// the body split.
			if _, err := db.Exec("DROP TRIGGER records_args_whole; " + damage); err != nil {
				t.Fatal(err)
			}
			db.Close()
			st, err := Open(context.Background(), path, Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			err = st.View(context.Background(), func(tx fence.Tx) error { _, err := tx.Get("big:1"); return err })
			var u *fence.UnreadableError
			if !errors.As(err, &u) || u.Intent != "big:1" {
				t.Fatalf("Get of a damaged split record: %v", err)
			}
			rep := checkInternal(t, path)
			if rep.OK || !strings.Contains(strings.Join(rep.Problems, "\n"), `"big:1"`) {
				t.Fatalf("check of a damaged split record: %+v", rep)
			}
		})
	}
}

func checkInternal(t *testing.T, path string) *CheckReport {
	t.Helper()
	rep, err := Check(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// Splitting and joining gives back the encoding byte for byte, whatever the record holds:
// arguments that spell the members the split looks for, a cert whose args are other bytes,
// exact arguments, non-compact arguments (encoded by encoding/json), names with quotes.
// Joining a damaged split body fails with an error and never panics.
func TestSplitJoinBytes(t *testing.T) {
	pad := strings.Repeat("p", 3000)
	args := json.RawMessage(fmt.Sprintf(`{"a":",\"args\":{\"cert\":{\"intent\":1}}","pad":%q}`, pad))
	other := json.RawMessage(fmt.Sprintf(`{"b":%q}`, pad))
	spaced := json.RawMessage(fmt.Sprintf(`{ "pad" : %q }`, pad))
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	base := func() *fence.Record {
		return &fence.Record{Intent: `i,"args":"x`, State: fence.StateInFlight, Fingerprint: "fp", Token: 7, Tool: `t,"cert":{"intent":`, Args: args, ClaimedAt: now, LeaseUntil: now, UpdatedAt: now}
	}
	cases := map[string]func(r *fence.Record){
		"claim": func(r *fence.Record) {},
		"exact": func(r *fence.Record) { r.ExactArgs = append([]byte(" \"quoted\" "), args...) },
		"done": func(r *fence.Record) {
			r.State = fence.StateDone
			r.Cert = &fence.Cert{Intent: r.Intent, Tool: r.Tool, Args: r.Args, Result: json.RawMessage(`{"ok":true}`), Hash: "h"}
		},
		"done exact": func(r *fence.Record) {
			r.ExactArgs = []byte(pad)
			r.Cert = &fence.Cert{Intent: r.Intent, Args: r.Args, Result: args, Hash: "h"}
		},
		"cert other": func(r *fence.Record) {
			r.Cert = &fence.Cert{Intent: r.Intent, Args: other, Result: json.RawMessage(`1`), Hash: "h"}
		},
		"spaced args": func(r *fence.Record) { r.Args = spaced; r.Cert = &fence.Cert{Args: spaced, Result: spaced} },
		"null args":   func(r *fence.Record) { r.Args = nil; r.ExactArgs = []byte(pad) },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			rec := base()
			edit(rec)
			enc, err := fence.EncodeRecord(rec)
			if err != nil {
				t.Fatal(err)
			}
			body, pieces, ok := splitBody(rec, enc)
			t.Logf("split %v: body %d bytes, pieces %d, whole %d", ok, len(body), len(pieces), len(enc))
			if !ok {
				return
			}
			if !isSplit(body) || len(body) >= len(enc) || wholeSize(body) != len(enc) || !checkPieces(body, pieces) {
				t.Fatalf("split body of %d bytes (whole %d, size %d)", len(body), len(enc), wholeSize(body))
			}
			got, err := joinBody(body, pieces)
			if err != nil || !bytes.Equal(got, enc) {
				t.Fatalf("joined %v:\n%s\nwant\n%s", err, got, enc)
			}
			for n := range len(body) - 1 {
				joinBody(body[:n], pieces) // no panic
			}
			for i := range min(len(body), 80) {
				bad := bytes.Clone(body)
				bad[i] ^= 0x5a
				if got, err := joinBody(bad, pieces); err == nil && bytes.Equal(got, enc) && i > 32 {
					t.Fatalf("a body damaged at byte %d joined to the record", i)
				}
				joinBody(bad, pieces[:len(pieces)/2])
			}
		})
	}
	if _, _, ok := splitBody(base(), []byte(`{}`)); ok {
		t.Fatal("split an encoding that does not hold the arguments")
	}
}
