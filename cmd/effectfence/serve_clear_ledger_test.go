package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestServeRefusalNamesItsLedgerInTheClearCommand: serve on a ledger of its own
// (EFFECTFENCE_LEDGER, as an MCP config's "env" sets it) is killed holding a claim; the next
// prepare is refused with the operator's clear command. Run as told, from a shell without that
// variable, the command must reach serve's ledger: it named none, and the clear went to the
// operator's default ledger ("no ledger at …/server.db").
func TestServeRefusalNamesItsLedgerInTheClearCommand(t *testing.T) {
	bin := effectfence(t)
	dir := t.TempDir()
	ledgerPath := filepath.Join(dir, "serve ledger.db")
	env := append(os.Environ(), "XDG_STATE_HOME="+filepath.Join(dir, "state"), "EFFECTFENCE_LEDGER="+ledgerPath, "EFFECTFENCE_LEASE_SECS=1")
	prepare := func() (*exec.Cmd, map[string]any) {
		t.Helper()
		cmd := exec.Command(bin, "serve")
		cmd.Env = env
		in, sc := startLines(t, cmd)
		fmt.Fprintln(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
		fmt.Fprintln(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		fmt.Fprintln(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"charge:o-9","tool":"charge","args":{"amount":1}}}}`)
		for sc.Scan() {
			if !strings.Contains(sc.Text(), `"id":2`) {
				continue
			}
			text, _ := toolText(t, sc.Bytes())
			var v map[string]any
			if err := json.Unmarshal([]byte(text), &v); err != nil {
				t.Fatalf("%v: %s", err, text)
			}
			return cmd, v
		}
		t.Fatal("serve gave no answer to fence_prepare")
		return nil, nil
	}

	first, v := prepare()
	if v["status"] != "fresh" {
		t.Fatalf("first prepare: %v", v)
	}
	if err := first.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	_, v = prepare()
	next, _ := v["next"].(string)
	if v["code"] != fence.CodePriorFailure {
		t.Fatalf("after the kill: %v", v)
	}
	_, command, ok := strings.Cut(next, "run `")
	command, _, _ = strings.Cut(command, "`")
	if !ok || !strings.HasPrefix(command, "effectfence ledger clear ") {
		t.Fatalf("next names no clear command: %s", next)
	}
	waitLeaseLapsed(t, ledgerPath, "charge:o-9") // the clear goes through once it has lapsed
	sh := exec.Command("sh", "-c", command)
	var shellEnv []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "EFFECTFENCE_LEDGER=") && !strings.HasPrefix(kv, "PATH=") {
			shellEnv = append(shellEnv, kv)
		}
	}
	sh.Env = append(shellEnv, "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := sh.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "cleared charge:o-9") {
		t.Fatalf("the clear command serve named (%s): %v\n%s", command, err, out)
	}
}

// TestServeOnAMemoryLedgerNamesNoClearCommand: serve with --ledger memory refuses a fenced
// intent. No `effectfence ledger` command reaches its ledger, yet the refusal told the operator
// to run `effectfence ledger clear INTENT --reason ...`, which goes to the operator's default
// ledger (server.db): "no ledger at …", or, where that ledger holds an intent of the same name
// fenced, a clear of that other intent, whose effect may have happened, while this one stays
// fenced. It must say what does reach it: a restart of serve, which forgets it.
func TestServeOnAMemoryLedgerNamesNoClearCommand(t *testing.T) {
	t.Parallel()
	const prep = `{"intent":"charge:o-mem","tool":"charge","args":{"amount":1}}`
	a := startServe(t, "--ledger", "memory")
	p := a.prepare(prep)
	if p.Status != "fresh" {
		t.Fatalf("first prepare: %+v", p)
	}
	raw, isErr := a.call("fence_abort", `{"ticket":`+ticketJSON(t, p.Ticket)+`,"reason":"timeout"}`)
	var ended struct{ Next string }
	if isErr || json.Unmarshal(raw, &ended) != nil {
		t.Fatalf("abort: %s", raw)
	}
	r := a.refused("fence_prepare", prep)
	if r.Code != fence.CodePriorFailure {
		t.Fatalf("after the abort: %+v", r)
	}
	for what, text := range map[string]string{"next": r.Next, "message": r.Message, "the abort's next": ended.Next} {
		if strings.Contains(text, "effectfence ledger clear") || !strings.Contains(text, "restart this serve process") {
			t.Errorf("%s of a refusal on a memory ledger: %s\nwant no clear command (none reaches this ledger) and the restart that does", what, text)
		}
	}
}

// TestServeClearCommandOfALedgerWithAPasswordPastes: serve on a PostgreSQL ledger whose URL
// carries a password refuses a fenced intent with the clear command, the password left out
// (xxxxx) and a note saying to put it back. The note was inside the command's backticks, so
// the command, pasted with the password put back, failed in the shell (`(` is syntax), and it
// said the password was "of the URL wrap was given", though serve was.
func TestServeClearCommandOfALedgerWithAPasswordPastes(t *testing.T) {
	t.Parallel()
	const password = "s3cr3t-pw"
	u, err := url.Parse(pgLedger(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password) // the test server trusts its clients
	const prep = `{"intent":"charge:pw-1","tool":"charge","args":{"amount":1}}`
	a := startServe(t, "--ledger", u.String())
	p := a.prepare(prep)
	if p.Status != "fresh" {
		t.Fatalf("first prepare: %+v", p)
	}
	if _, isErr := a.call("fence_abort", `{"ticket":`+ticketJSON(t, p.Ticket)+`,"reason":"timeout"}`); isErr {
		t.Fatal("abort refused")
	}
	r := a.refused("fence_prepare", prep)
	if r.Code != fence.CodePriorFailure || strings.Contains(r.Next, password) || strings.Contains(r.Message, password) {
		t.Fatalf("after the abort: %+v", r)
	}
	if strings.Contains(r.Next, "wrap was given") {
		t.Errorf("serve's refusal speaks of wrap: %s", r.Next)
	}
	_, command, ok := strings.Cut(r.Next, "run `")
	command, _, _ = strings.Cut(command, "`")
	if !ok || !strings.HasPrefix(command, "effectfence ledger clear ") || !strings.Contains(command, "xxxxx") {
		t.Fatalf("next names no clear command with the password left out: %s", r.Next)
	}
	sh := exec.Command("sh", "-c", strings.Replace(command, "xxxxx", password, 1))
	sh.Env = append(os.Environ(), "PATH="+filepath.Dir(effectfence(t))+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := sh.CombinedOutput(); err != nil || !strings.Contains(string(out), "cleared charge:pw-1") {
		t.Fatalf("the clear command serve named, its password put back (%s): %v\n%s", command, err, out)
	}
}
