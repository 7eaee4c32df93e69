package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// previousBuild is the last commit whose SQLite ledger had the schema-2 indexes records_state
// and records_cert_hash; the builds after it replace them with records_open at every open for
// writing, without a new schema version, so that this build can be rolled back to it
// (docs/DECISIONS-sqlite.md).
const previousBuild = "bb118321d86a3e5c31acd0bac1c22b9cf016d095"

// TestPreviousBuildKeepsReceipts takes a SQLite ledger from the previous build (compiled from
// git history) to this one, both as real `effectfence serve` processes: every receipt the
// previous one recorded is replayed by this one, byte for byte, and this one writes new
// decisions (one with arguments large enough to be stored apart, schema 3) and verifies the
// result. The builds also store a done record's result differently (the previous one always
// beside its result_bytes, this one without a result_bytes that repeats result);
// checkStoredResult sees that each did.
//
// Schema 3 (docs/DECISIONS-sqlite.md) ends the rollback this test used to make: the previous
// build writes schema 2 and refuses a ledger this build opened for writing. What the test pins
// instead is how it refuses: "newer than this build's … (upgrade effectfence)", advising not to
// move the file aside, and changing nothing, so that this build, run again, still replays every
// receipt. A rollback that ran against the file, or advice that lost it, would re-run calls.
func TestPreviousBuildKeepsReceipts(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the previous release from git history")
	}
	prev := buildPreviousBuild(t, previousBuild)
	// previousBuildReadsHostileResults is not run here since schema 3: the previous build
	// reads no ledger this build wrote (it refuses it, below). The PostgreSQL twin still runs
	// it, and this build reads every hostile result it stores (fencetest's contract tests).
	cur := effectfence(t)
	ledger := filepath.Join(t.TempDir(), "ledger.db")
	body := func(intent string) []byte {
		t.Helper()
		db, err := sql.Open("sqlite", "file:"+ledger+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var b []byte
		if err := db.QueryRow("SELECT body FROM records WHERE intent = ?", intent).Scan(&b); err != nil {
			t.Fatalf("reading %s's record: %v", intent, err)
		}
		return b
	}
	backAndForth(t, prev, cur, ledger, true, func() {
		if got := ledgerIndexes(t, ledger); !slices.Contains(got, "records_state") {
			t.Fatalf("the previous build's ledger has indexes %v; want its records_state (is %s the build before the change?)", got, previousBuild[:7])
		}
		checkStoredResult(t, "the previous build", body("pay:1"), true)
	}, func() {
		if got := ledgerIndexes(t, ledger); !slices.Contains(got, "records_life") || slices.Contains(got, "records_state") {
			t.Fatalf("after this build opened it, the ledger has indexes %v; want records_life and no records_state", got)
		}
		checkStoredResult(t, "this build", body("pay:2"), false)
		if b := body("big:2"); len(b) == 0 || b[0] != 0 {
			t.Fatalf("this build stored big:2's 3 KB of arguments in its record (schema 3 stores them apart): %.80q", b)
		}
	})
}

// checkStoredResult checks how a done record holds its result: with result_bytes beside it
// (the previous builds), or, since the stored form leaves out a result_bytes that repeats
// result (fence.EncodeRecord), with result alone. Either build must replay the other's.
func checkStoredResult(t *testing.T, who string, body []byte, withBytes bool) {
	t.Helper()
	if !bytes.Contains(body, []byte(`"result_sha256":`)) || bytes.Contains(body, []byte(`"result_bytes":`)) != withBytes {
		t.Fatalf("%s stored a done record with result_bytes %v, want %v:\n%s", who, !withBytes, withBytes, body)
	}
}

// previousPostgresBuild is the last commit whose PostgreSQL ledger kept schema version 1's
// record indexes (effectfence_records_state, effectfence_records_cert); the builds after it
// replace them with effectfence_records_open at every open, without a new schema version, so
// that the previous build still opens the ledger (docs/DECISIONS-postgres.md).
const previousPostgresBuild = "0b1a19ab3839d177d1ea3aafae8f3ca66fc60c1b"

// TestPreviousBuildKeepsReceiptsPostgres is TestPreviousBuildKeepsReceipts for a PostgreSQL
// ledger: the previous build creates it, this build replaces its record indexes, and each
// build replays the other's receipts and writes new ones.
func TestPreviousBuildKeepsReceiptsPostgres(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the previous release from git history")
	}
	ledger := pgLedger(t)
	prev := buildPreviousBuild(t, previousPostgresBuild)
	t.Run("HostileResults", func(t *testing.T) { previousBuildReadsHostileResults(t, prev, pgLedger(t)) })
	cur := effectfence(t)
	indexes := func() []string {
		t.Helper()
		ctx := context.Background()
		u, err := url.Parse(ledger)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := connectLedger(ctx, ledger)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'effectfence_records' ORDER BY 1", u.Query().Get("search_path"))
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	body := func(intent string) []byte {
		t.Helper()
		ctx := context.Background()
		conn, err := connectLedger(ctx, ledger)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var b []byte
		if err := conn.QueryRow(ctx, "SELECT body FROM effectfence_records WHERE intent = $1", intent).Scan(&b); err != nil {
			t.Fatalf("reading %s's record: %v", intent, err)
		}
		return b
	}
	backAndForth(t, prev, cur, ledger, false, func() {
		if got := indexes(); !slices.Contains(got, "effectfence_records_state") {
			t.Fatalf("the previous build's ledger has indexes %v; want its effectfence_records_state (is %s the build before the change?)", got, previousPostgresBuild[:7])
		}
		checkStoredResult(t, "the previous build", body("pay:1"), true)
	}, func() {
		if got := indexes(); !slices.Contains(got, "effectfence_records_open") || slices.Contains(got, "effectfence_records_state") || slices.Contains(got, "effectfence_records_cert") {
			t.Fatalf("after this build opened it, the ledger has indexes %v; want effectfence_records_open and neither effectfence_records_state nor _cert", got)
		}
		checkStoredResult(t, "this build", body("pay:2"), false)
	})
}

// backAndForth takes the ledger at location back and forth between the previous build and
// this one, both as real `effectfence serve` processes: every receipt either one recorded is
// replayed by the other, byte for byte, each writes new decisions into a ledger the other last
// opened, and both verify the result. afterPrev checks the ledger the previous build created,
// afterCur the ledger once this build opened it. With newer, this build's schema is newer
// than the previous build's: the previous build must refuse the ledger this build opened, say
// to upgrade effectfence, and change nothing, and this build then replays every receipt again.
func backAndForth(t *testing.T, prev, cur, ledger string, newer bool, afterPrev, afterCur func()) {
	t.Helper()
	certs := map[string]json.RawMessage{} // intent -> the cert its first commit returned
	// step runs one serve process of bin: every intent already decided must replay its cert
	// unchanged, and fresh is admitted and committed.
	step := func(name, bin, fresh string) {
		t.Helper()
		s := startRawServe(t, bin, ledger)
		defer s.stop()
		for intent, want := range certs {
			r := s.call("fence_prepare", map[string]any{"intent": intent, "tool": "charge", "args": callArgs(intent)})
			var p struct {
				Status string          `json:"status"`
				Cert   json.RawMessage `json:"cert"`
			}
			if err := json.Unmarshal(r, &p); err != nil || p.Status != "already_done" {
				t.Fatalf("%s: %s was decided before; the ledger answered %s", name, intent, r)
			}
			if !bytes.Equal(compactJSON(t, p.Cert), compactJSON(t, want)) {
				t.Fatalf("%s: %s's receipt changed:\n got %s\nwant %s", name, intent, p.Cert, want)
			}
		}
		r := s.call("fence_prepare", map[string]any{"intent": fresh, "tool": "charge", "args": callArgs(fresh)})
		var p struct {
			Status string          `json:"status"`
			Ticket json.RawMessage `json:"ticket"`
		}
		if err := json.Unmarshal(r, &p); err != nil || p.Status != "fresh" {
			t.Fatalf("%s: %s is new; the ledger answered %s", name, fresh, r)
		}
		c := s.call("fence_commit", map[string]any{"ticket": p.Ticket, "result": map[string]any{"charged": fresh, "by": name}})
		var done struct {
			Cert json.RawMessage `json:"cert"`
		}
		if err := json.Unmarshal(c, &done); err != nil || len(done.Cert) == 0 {
			t.Fatalf("%s: commit of %s answered %s", name, fresh, c)
		}
		certs[fresh] = done.Cert
	}
	step("previous build, new ledger", prev, "pay:1")
	afterPrev()
	step("this build after the previous", cur, "pay:2")
	step("this build, large arguments", cur, "big:2")
	afterCur()
	verifiers := []string{prev, cur}
	if newer {
		// The previous build refuses the file this build upgraded, and changes nothing (this
		// build replays every receipt below). Its advice, "move the file aside to start a new
		// ledger", is that of the builds before 00084a7; those since say not to
		// (docs/DECISIONS-sqlite.md, "Large arguments are stored apart").
		out, err := exec.Command(prev, "ledger", "ls", "--ledger", ledger).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "newer than this build's") || !strings.Contains(string(out), "(upgrade effectfence)") ||
			!strings.Contains(string(out), "nothing was changed") {
			t.Fatalf("the previous build on a ledger of a newer schema: %v\n%s", err, out)
		}
		verifiers = []string{cur}
	} else {
		step("previous build after this one (a rollback)", prev, "pay:3")
	}
	step("this build again", cur, "pay:4")
	for _, bin := range verifiers {
		out, err := exec.Command(bin, "ledger", "verify", "--ledger", ledger).CombinedOutput()
		if err != nil {
			t.Fatalf("%s ledger verify: %v\n%s", filepath.Base(filepath.Dir(bin)), err, out)
		}
	}
}

// buildPreviousBuild compiles effectfence at commit from this clone's git history
// (git archive: the checkout is not touched), or skips when git or that commit is not here.
func buildPreviousBuild(t *testing.T, commit string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: the previous build comes from git history")
	}
	if err := exec.Command("git", "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		t.Skipf("commit %s is not in this clone's history (a shallow clone?): %v", commit[:7], err)
	}
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	archive := exec.Command("git", "archive", "--format=tar", commit)
	archive.Dir = strings.TrimSpace(string(top)) // from a subdirectory, git archives only that
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archiveErr, untarErr bytes.Buffer // two processes: one buffer each
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", commit[:7], err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar: %v\n%s", err, untarErr.String())
	}
	bin := filepath.Join(t.TempDir(), "previous", "effectfence")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/effectfence") // -trimpath: the build cache serves the next run
	build.Dir = src
	plainBuilds.Lock() // one at a time: the first fills the cache with what the others share
	out, err := build.CombinedOutput()
	plainBuilds.Unlock()
	if err != nil {
		t.Fatalf("go build of %s: %v\n%s", commit[:7], err, out)
	}
	return bin
}

// ledgerIndexes lists the indexes on the records table of the SQLite file at path.
func ledgerIndexes(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'records' AND sql IS NOT NULL ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

func compactJSON(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("not JSON: %s", raw)
	}
	return b.Bytes()
}

// rawServe is an `effectfence serve` process driven one request at a time over its stdio.
type rawServe struct {
	t      *testing.T
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *lockedBuffer // written by the process's stderr copier while a failing test reads it
	next   int
}

func startRawServe(t *testing.T, bin, ledger string) *rawServe {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--ledger", ledger)
	cmd.Env = append(os.Environ(), "NO_COLOR=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServe{t: t, cmd: cmd, in: in, out: bufio.NewReaderSize(outPipe, 1<<20), stderr: &lockedBuffer{}}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.request("initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"previous-build-test","version":"0"}}`)
	s.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

func (s *rawServe) send(line string) {
	s.t.Helper()
	if _, err := s.in.Write([]byte(line + "\n")); err != nil {
		s.t.Fatalf("write to serve: %v (stderr: %s)", err, s.stderr.String())
	}
}

// request sends one request and returns its result; a JSON-RPC error fails the test.
func (s *rawServe) request(method, params string) json.RawMessage {
	s.t.Helper()
	s.next++
	s.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, s.next, method, params))
	deadline := time.AfterFunc(60*time.Second, func() { s.cmd.Process.Kill() })
	defer deadline.Stop()
	for {
		line, err := s.out.ReadBytes('\n')
		if err != nil {
			s.t.Fatalf("%s: read from serve: %v (stderr: %s)", method, err, s.stderr.String())
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(line, &m); err != nil {
			s.t.Fatalf("serve wrote a line that is not JSON: %q", line)
		}
		if m.Method != "" || string(m.ID) != fmt.Sprint(s.next) {
			continue // a notification or a request of the server's
		}
		if m.Error != nil {
			s.t.Fatalf("%s: %s", method, m.Error)
		}
		return m.Result
	}
}

// call calls a tool and returns its structuredContent; a tool error fails the test.
func (s *rawServe) call(tool string, args any) json.RawMessage {
	s.t.Helper()
	a, err := json.Marshal(args)
	if err != nil {
		s.t.Fatal(err)
	}
	res := s.request("tools/call", fmt.Sprintf(`{"name":%q,"arguments":%s}`, tool, a))
	var r struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if err := json.Unmarshal(res, &r); err != nil || r.IsError {
		s.t.Fatalf("%s %s: %s", tool, a, res)
	}
	return r.StructuredContent
}

func (s *rawServe) stop() {
	s.t.Helper()
	s.in.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			s.t.Fatalf("serve exited with %v (stderr: %s)", err, strings.TrimSpace(s.stderr.String()))
		}
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		s.t.Fatalf("serve did not exit after its stdin closed (stderr: %s)", s.stderr.String())
	}
}

// callArgs are the arguments backAndForth calls intent with: for an intent "big:…", about 3 KB,
// which a SQLite ledger of schema 3 stores apart from the record (split.go).
func callArgs(intent string) map[string]any {
	if strings.HasPrefix(intent, "big:") {
		return map[string]any{"n": intent, "memo": strings.Repeat("m", 3000)}
	}
	return map[string]any{"n": intent}
}
