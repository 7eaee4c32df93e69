package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestLedgerHelperProcess is not a test: it is the body of the fence processes the crash tests
// start (and kill). It does nothing unless EFFECTFENCE_TEST_HELPER is set.
//
// Modes: "hold" prepares the intent, performs the effect and blocks before committing;
// "commit-hold" also commits and then blocks; "attempt" prepares once and, if admitted,
// performs the effect and commits. Each prints one line: "admitted", "committed HASH",
// "replay HASH" or "refused CODE".
func TestLedgerHelperProcess(t *testing.T) {
	mode := os.Getenv("EFFECTFENCE_TEST_HELPER")
	if mode == "" {
		return
	}
	err := helper(mode, os.Getenv("EFFECTFENCE_TEST_EFFECTS"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helper(mode, effects string) error {
	ctx := context.Background()
	o, err := store.FromEnv("server")
	if err != nil {
		return err
	}
	l, err := store.Open(ctx, o)
	if err != nil {
		return err
	}
	req := fence.Request{Intent: "charge:order-7", Tool: "charge_card", Args: []byte(`{"amount":4900}`), Agent: "helper"}
	adm, err := l.Prepare(ctx, req)
	var coded interface{ Code() string }
	if errors.As(err, &coded) {
		fmt.Printf("refused %s\n", coded.Code())
		return l.Close()
	}
	if err != nil {
		return err
	}
	if !adm.Fresh() {
		fmt.Printf("replay %s\n", adm.Cert.Hash)
		return l.Close()
	}
	f, err := os.OpenFile(effects, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "%d\n", os.Getpid())
	if err := f.Sync(); err != nil {
		return err
	}
	f.Close()
	if mode == "hold" {
		fmt.Println("admitted")
		select {} // killed here, after admission and the effect, before the commit
	}
	cert, err := l.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_`+fmt.Sprint(os.Getpid())+`"}`))
	if err != nil {
		return err
	}
	fmt.Printf("committed %s\n", cert.Hash)
	if mode == "commit-hold" {
		select {} // killed here, after the commit
	}
	return l.Close()
}

// waitLeaseLapsed sleeps until the lease of intent's claim in the ledger at loc has lapsed
// (read with ledger show).
func waitLeaseLapsed(t *testing.T, loc, intent string) {
	t.Helper()
	code, out, errOut := runCLI(t, "", "ledger", "show", intent, "--ledger", loc, "--json")
	var d ledger.Detail
	if code != exitOK || json.Unmarshal([]byte(out), &d) != nil || d.Record.LeaseUntil.IsZero() {
		t.Fatalf("ledger show %s = %d\n%s%s", intent, code, out, errOut)
	}
	time.Sleep(time.Until(d.Record.LeaseUntil) + 200*time.Millisecond)
}

type helperProc struct {
	cmd  *exec.Cmd
	line string
}

// startHelper starts a helper process and waits for its line.
func startHelper(t *testing.T, mode, ledgerPath, effects string, env ...string) *helperProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLedgerHelperProcess$")
	cmd.Env = append(append(os.Environ(), "EFFECTFENCE_TEST_HELPER="+mode, "EFFECTFENCE_TEST_EFFECTS="+effects, store.EnvLedger+"="+ledgerPath), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper %s printed nothing", mode)
	}
	return &helperProc{cmd: cmd, line: sc.Text()}
}

func (h *helperProc) kill9(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := h.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper did not die of SIGKILL: %v", err)
	}
}

func (h *helperProc) wait(t *testing.T) string {
	t.Helper()
	if err := h.cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	return h.line
}

func lines(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// Killed with SIGKILL after admission (and after the effect) but before the commit: on
// restart the intent is unknown and fenced, `ledger ls` shows it, `ledger clear` frees it.
func TestKillAfterAdmissionIsFencedUntilCleared(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	dir := t.TempDir()
	path, effects := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "effects")

	h := startHelper(t, "hold", path, effects, store.EnvLeaseSecs+"=1")
	if h.line != "admitted" {
		t.Fatalf("first process: %q", h.line)
	}
	h.kill9(t)

	if got := startHelper(t, "attempt", path, effects).wait(t); got != "refused prior_failure" {
		t.Fatalf("after the crash, a duplicate got %q; want refused prior_failure", got)
	}
	if n := lines(t, effects); n != 1 {
		t.Fatalf("%d executions; want 1", n)
	}

	code, out, errOut := runCLI(t, "", "ledger", "ls", "--ledger", path, "--state", "fenced")
	if code != exitOK || !strings.Contains(out, "charge:order-7") || !strings.Contains(out, "unknown") || !strings.Contains(out, "is gone") {
		t.Fatalf("ledger ls = %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(out, "\x1b[") {
		t.Fatal("colour escapes in output with NO_COLOR and no terminal")
	}
	code, out, _ = runCLI(t, "", "ledger", "ls", "--ledger", path, "--json")
	var ls struct{ Records []fence.Record }
	if code != exitOK || json.Unmarshal([]byte(out), &ls) != nil || len(ls.Records) != 1 || ls.Records[0].State != fence.StateUnknown {
		t.Fatalf("ledger ls --json = %d %s", code, out)
	}

	if code, _, errOut := runCLI(t, "", "ledger", "clear", "charge:order-7", "--ledger", path); code != exitUsage || !strings.Contains(errOut, "--reason") {
		t.Fatalf("clear without a reason = %d %s", code, errOut)
	}
	// The holder is gone, but a clear waits for its lease (1 s here): a process it started
	// could still run the effect.
	waitLeaseLapsed(t, path, "charge:order-7")
	code, out, errOut = runCLI(t, "", "ledger", "clear", "charge:order-7", "--ledger", path, "--reason", "no charge ch_ in the PSP dashboard")
	if code != exitOK || !strings.Contains(out, "cleared charge:order-7 (was unknown)") {
		t.Fatalf("ledger clear = %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runCLI(t, "", "ledger", "show", "charge:order-7", "--ledger", path, "--json")
	var d ledger.Detail
	if code != exitOK || json.Unmarshal([]byte(out), &d) != nil {
		t.Fatalf("ledger show --json = %d %s", code, out)
	}
	var kinds []string
	var clearEv fence.Event
	for _, ev := range d.Events {
		kinds = append(kinds, ev.Kind)
		if ev.Kind == fence.EventClear {
			clearEv = ev
		}
	}
	if d.Record.State != fence.StateNone || strings.Join(kinds, ",") != "orphan,clear" ||
		clearEv.Who != ledger.Operator() || clearEv.Reason != "no charge ch_ in the PSP dashboard" || clearEv.State != fence.StateUnknown {
		t.Fatalf("after clear: %+v", d)
	}

	got := startHelper(t, "attempt", path, effects).wait(t)
	if !strings.HasPrefix(got, "committed ") {
		t.Fatalf("after clear, the next attempt got %q; want it to run", got)
	}
	if n := lines(t, effects); n != 2 {
		t.Fatalf("%d executions; want 2 (one before the crash, one after the operator's clear)", n)
	}
	if code, _, errOut := runCLI(t, "", "ledger", "clear", "charge:nothing", "--ledger", path, "--reason", "x"); code != exitError || !strings.Contains(errOut, "holds no intent") {
		t.Fatalf("clear of an unknown intent = %d %s", code, errOut)
	}
}

// Killed with SIGKILL after the commit: a duplicate in a new process replays the same cert.
func TestKillAfterCommitReplays(t *testing.T) {
	dir := t.TempDir()
	path, effects := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "effects")
	h := startHelper(t, "commit-hold", path, effects)
	hash, ok := strings.CutPrefix(h.line, "committed ")
	if !ok {
		t.Fatalf("first process: %q", h.line)
	}
	h.kill9(t)
	for range 2 {
		if got := startHelper(t, "attempt", path, effects).wait(t); got != "replay "+hash {
			t.Fatalf("after the crash, a duplicate got %q; want replay %s", got, hash)
		}
	}
	if n := lines(t, effects); n != 1 {
		t.Fatalf("%d executions; want 1", n)
	}
	code, out, errOut := runCLI(t, "", "ledger", "verify", "--ledger", path)
	if code != exitOK || !strings.Contains(out, "1 cert(s), 1 verified") {
		t.Fatalf("verify = %d\n%s%s", code, out, errOut)
	}
}

// seedCLI fills a ledger through the engine: a parent cert, a child linked to it, a child of
// a parent that is not in the ledger, and an aborted intent.
func seedCLI(t *testing.T, path string) {
	t.Helper()
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	commit := func(r fence.Request, result string) *fence.Cert {
		adm, err := l.Prepare(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		c, err := l.Commit(ctx, *adm.Ticket, []byte(result))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	p := commit(fence.Request{Intent: "scale:web", Tool: "kubectl_scale", Args: []byte(`{"replicas":3}`), Domain: "deploy:web"}, `"scaled"`)
	commit(fence.Request{Intent: "notify:web", Tool: "send", Args: []byte(`{"to":"ops"}`), Parent: p.Hash}, `"sent"`)
	commit(fence.Request{Intent: "orphan:child", Tool: "send", Args: []byte(`{}`), Parent: strings.Repeat("ab", 32)}, `"sent"`)
	adm, err := l.Prepare(ctx, fence.Request{Intent: "refund:9", Tool: "refund", Args: []byte(`{"amount":5}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Abort(ctx, *adm.Ticket, "gateway timeout"); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestLedgerCommands(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	path := filepath.Join(t.TempDir(), "ledger.db")
	seedCLI(t, path)

	code, out, _ := runCLI(t, "", "ledger", "ls", "--ledger", path)
	for _, want := range []string{"4 intent(s)", "scale:web", "deploy:web/1", "refund:9", "failed", "gateway timeout"} {
		if !strings.Contains(out, want) {
			t.Errorf("ledger ls lacks %q:\n%s", want, out)
		}
	}
	if code != exitOK {
		t.Fatalf("ledger ls = %d", code)
	}
	if _, out, _ := runCLI(t, "", "ledger", "ls", "--ledger", path, "--state", "done"); strings.Contains(out, "refund:9") || !strings.Contains(out, "3 intent(s)") {
		t.Errorf("ledger ls --state done:\n%s", out)
	}
	if code, _, errOut := runCLI(t, "", "ledger", "ls", "--ledger", path, "--state", "bogus"); code != exitUsage || !strings.Contains(errOut, "unknown state") {
		t.Errorf("bad --state = %d %s", code, errOut)
	}
	if code, out, _ := runCLI(t, "", "ledger", "show", "refund:9", "--ledger", path); code != exitOK || !strings.Contains(out, "fenced:") || !strings.Contains(out, "abort") {
		t.Errorf("ledger show of a failed intent = %d\n%s", code, out)
	}

	code, out, errOut := runCLI(t, "", "ledger", "verify", "--ledger", path, "--json")
	var rep ledger.VerifyReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.Certs != 3 || rep.Verified != 3 || rep.Linked != 1 || len(rep.Unresolved) != 1 {
		t.Fatalf("verify = %d %s %s", code, out, errOut)
	}

	code, out, _ = runCLI(t, "", "ledger", "export", "--ledger", path)
	var recs, evs int
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var l ledger.ExportLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		if l.Record != nil {
			recs++
		}
		if l.Event != nil {
			evs++
		}
	}
	if code != exitOK || recs != 4 || evs != 1 {
		t.Fatalf("export = %d: %d records, %d events", code, recs, evs)
	}

	code, out, _ = runCLI(t, "", "ledger", "stats", "--ledger", path, "--json")
	var stats struct {
		Counters fence.Counters
		States   map[fence.State]int
	}
	if code != exitOK || json.Unmarshal([]byte(out), &stats) != nil || stats.Counters.Admitted != 4 || stats.States[fence.StateDone] != 3 {
		t.Fatalf("stats = %d %s", code, out)
	}
	if code, out, _ := runCLI(t, "", "ledger", "sweep", "--ledger", path); code != exitOK || !strings.Contains(out, "swept 0") {
		t.Fatalf("sweep = %d %s", code, out)
	}
	// docs/ledger.md: every subcommand but export takes --json (ls, show, verify, stats, check
	// and resolve are read as JSON elsewhere; sweep and clear here).
	var swept struct {
		Ledger string
		Swept  *int
	}
	if code, out, _ := runCLI(t, "", "ledger", "sweep", "--ledger", path, "--json"); code != exitOK || json.Unmarshal([]byte(out), &swept) != nil || swept.Swept == nil || *swept.Swept != 0 || swept.Ledger != path {
		t.Fatalf("sweep --json = %d %s", code, out)
	}
	if code, out, _ := runCLI(t, "", "ledger", "check", "--ledger", path); code != exitOK || !strings.Contains(out, ": OK") || !strings.Contains(out, fmt.Sprintf("schema version %d", sqlite.SchemaVersion)) {
		t.Fatalf("check = %d %s", code, out)
	}

	var cleared struct {
		Cleared, Who, Reason, Ledger string
		PreviousState                fence.State `json:"previous_state"`
	}
	if code, out, _ := runCLI(t, "", "ledger", "clear", "refund:9", "--reason", "no refund at the bank", "--ledger", path, "--json"); code != exitOK ||
		json.Unmarshal([]byte(out), &cleared) != nil || cleared.Cleared != "refund:9" || cleared.PreviousState != fence.StateFailed ||
		cleared.Who != ledger.Operator() || cleared.Reason != "no refund at the bank" || cleared.Ledger != path {
		t.Fatalf("clear --json = %d %s", code, out)
	}

	// Tamper with a cert's result behind the engine's back: verify must fail with exit 1.
	tamper(t, path, "notify:web")
	code, out, errOut = runCLI(t, "", "ledger", "verify", "--ledger", path)
	if code != exitError || !strings.Contains(out, "does not verify") || !strings.Contains(errOut, "1 problem") {
		t.Fatalf("verify of a tampered ledger = %d\n%s%s", code, out, errOut)
	}

	for _, args := range [][]string{
		{"ledger", "show", "--ledger", path},
		{"ledger", "ls", "--ledger", path, "extra"},
		{"ledger", "ls", "--for"},
		{"ledger", "ls", "--for", "--ledger", path, "--", "node", "server.js"},
		{"ledger", "export", "--format", "csv", "--ledger", path},
		{"ledger", "frobnicate"},
	} {
		if code, _, errOut := runCLI(t, "", args...); code != exitUsage {
			t.Errorf("%q = %d (%s); want usage exit %d", args, code, errOut, exitUsage)
		}
	}
}

// tamper rewrites the result inside an intent's stored cert, keeping its hash.
func tamper(t *testing.T, path, intent string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var body []byte
	if err := db.QueryRow("SELECT body FROM records WHERE intent = ?", intent).Scan(&body); err != nil {
		t.Fatal(err)
	}
	var rec fence.Record
	if err := json.Unmarshal(body, &rec); err != nil {
		t.Fatal(err)
	}
	rec.Cert.Result = json.RawMessage(`"not sent"`)
	body, _ = json.Marshal(rec)
	if _, err := db.Exec("UPDATE records SET body = ? WHERE intent = ?", body, intent); err != nil {
		t.Fatal(err)
	}
}

// --for resolves the same file wrap uses for that child command.
func TestLedgerFor(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	t.Setenv(store.EnvLedger, "")
	child := []string{"npx", "-y", "@modelcontextprotocol/server-memory"}
	code, _, errOut := runCLI(t, "", append([]string{"ledger", "ls", "--for", "--"}, child...)...)
	want := filepath.Join(state, "effectfence", store.WrapName(child)+".db")
	if code != exitError || !strings.Contains(errOut, "no ledger at "+want) {
		t.Fatalf("ls --for before any wrap ran = %d %s", code, errOut)
	}
	seedCLI(t, want)
	code, out, errOut := runCLI(t, "", append([]string{"ledger", "show", "refund:9", "--for", "--"}, child...)...)
	if code != exitOK || !strings.Contains(out, "gateway timeout") {
		t.Fatalf("show --for = %d %s %s", code, out, errOut)
	}
	// wrap opens EFFECTFENCE_LEDGER when it is set: so does --for.
	shared := filepath.Join(t.TempDir(), "shared.db")
	t.Setenv(store.EnvLedger, shared)
	code, _, errOut = runCLI(t, "", append([]string{"ledger", "ls", "--for", "--"}, child...)...)
	if code != exitError || !strings.Contains(errOut, "no ledger at "+shared) {
		t.Fatalf("ls --for with %s set = %d %s", store.EnvLedger, code, errOut)
	}
}

func TestLedgerCheckDamaged(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	seedCLI(t, good)
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"foreign":   []byte("name,amount\nalice,3\n"),
		"truncated": b[:len(b)/2],
		"corrupt":   append(append(bytes.Clone(b[:4096]), bytes.Repeat([]byte{0x5a}, 4096)...), b[8192:]...),
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".db")
			if err := os.WriteFile(path, content, 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := runCLI(t, "", "ledger", "check", "--ledger", path)
			if code != exitError || !strings.Contains(out, "problem: ") || !strings.Contains(out, "what to do: ") || !strings.Contains(out, "mv "+path) {
				t.Fatalf("check = %d\n%s%s", code, out, errOut)
			}
			after, _ := os.ReadFile(path)
			if !bytes.Equal(after, content) {
				t.Fatal("check changed the file")
			}
			code, _, errOut = runCLI(t, "", "ledger", "ls", "--ledger", path)
			if code != exitError || !strings.Contains(errOut, "effectfence ledger check") {
				t.Fatalf("ls of a damaged ledger = %d %s", code, errOut)
			}
		})
	}
	code, out, _ := runCLI(t, "", "ledger", "check", "--ledger", good, "--json")
	var rep store.CheckReport
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || !rep.OK || rep.States["done"] != 3 || rep.States["failed"] != 1 {
		t.Fatalf("check --json of a good ledger = %d %s", code, out)
	}
}

// TestLedgerForFindsWrapsFile runs the real binary as an operator would: a wrap with its
// default ledger records a call, then `ledger ls --for -- <the same command>` from the same
// directory and environment finds that record, with and without --scope; a fenced call's clear
// hint names the file by its absolute path.
func TestLedgerForFindsWrapsFile(t *testing.T) {
	t.Parallel()
	bin := effectfence(t)
	dir := t.TempDir()
	env := []string{"XDG_STATE_HOME=" + t.TempDir(), store.EnvLedger + "="}
	child := []string{bin, "demo-server", "--latency", "0s"}
	session := func(name string) string {
		return `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}` + "\n" +
			`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n" +
			`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"record_event","arguments":{"name":"` + name + `"}}}` + "\n"
	}
	runEnv := runIn(t, bin, dir, append([]string{"GORACE=atexit_sleep_ms=0"}, env...)...)
	inDir := func(stdin string, args ...string) result {
		t.Helper()
		return runEnv(nil, stdin, args...)
	}
	for _, scope := range []string{"", "fleet-a"} {
		var sc []string
		if scope != "" {
			sc = []string{"--scope", scope}
		}
		event := "for-test-" + scope
		w := inDir(session(event), append(append(append([]string{"wrap", "--grace", "60s"}, sc...), "--"), child...)...)
		if w.code != exitOK || !strings.Contains(w.stdout, `"id":1`) || !strings.Contains(w.stderr, "admitted=1") {
			t.Fatalf("wrap %v: exit %d\nstdout %s\nstderr %s", sc, w.code, w.stdout, w.stderr)
		}
		r := inDir("", append(append(append([]string{"ledger", "ls", "--json"}, sc...), "--for", "--"), child...)...)
		if r.code != exitOK || !strings.Contains(r.stdout, "record_event") || !strings.Contains(r.stdout, event) {
			t.Fatalf("ledger ls --for %v after wrap: exit %d\nstdout %s\nstderr %s", sc, r.code, r.stdout, r.stderr)
		}
	}
	// Without --scope, --for does not reach the scoped file (another scope, another file),
	// and the derived scope's file holds no record of the scoped wrap.
	r := inDir("", append([]string{"ledger", "ls", "--json", "--for", "--"}, child...)...)
	if r.code != exitOK || strings.Contains(r.stdout, "for-test-fleet-a") {
		t.Fatalf("ledger ls --for without --scope: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	// From another directory the derived scope is another: --for names a file nothing used.
	r = runBinary(t, env, "", append([]string{"ledger", "ls", "--for", "--"}, child...)...)
	if r.code != exitError || !strings.Contains(r.stderr, "no ledger at") {
		t.Fatalf("ledger ls --for from another directory: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if r := inDir("", "ledger", "ls", "--scope", "x"); r.code != exitUsage || !strings.Contains(r.stderr, "goes with --for") {
		t.Fatalf("ledger ls --scope without --for: exit %d, stderr %s", r.code, r.stderr)
	}
}

func TestClearHint(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	abs, _ := filepath.Abs("l.db")
	for loc, want := range map[string]string{
		"l.db":                          "--ledger " + abs,
		"postgres://u:secret@h/db":      "--ledger 'postgres://u:xxxxx@h/db' (with the password",
		"postgres://u@h/db?sslmode=off": "--ledger 'postgres://u@h/db?sslmode=off'",
	} {
		if got := clearHint(loc); !strings.HasPrefix(got, want) || strings.Contains(got, "secret") {
			t.Errorf("clearHint(%q) = %q; want it to start with %q", loc, got, want)
		}
	}
}
