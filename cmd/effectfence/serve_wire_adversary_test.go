package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServeBinaryHostileWire holds docs/serve.md's promises about the wire against the built
// binary, over its real stdin and stdout: every answer carries the client's id byte for byte
// (numbers beyond 2^53, lone surrogates, escapes), a tools/call with an id MCP does not allow
// (null, a boolean, an object) or none at all is not run, text a decoder would change is
// refused naming the member, numbers beyond float64 are kept exactly through commit and
// replay, and stdout carries nothing but JSON-RPC lines.
func TestServeBinaryHostileWire(t *testing.T) {
	bin := effectfence(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--ledger", "memory")
	stdin, out, stderr := startPiped(t, cmd)
	type answer struct {
		ID     json.RawMessage `json:"id"`
		Result *struct {
			IsError           bool            `json:"isError"`
			StructuredContent json.RawMessage `json:"structuredContent"`
		} `json:"result"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		raw []byte
	}
	send := func(line string) {
		t.Helper()
		if _, err := io.WriteString(stdin, line+"\n"); err != nil {
			t.Fatalf("write: %v (stderr: %s)", err, stderr.String())
		}
	}
	recv := func() answer {
		t.Helper()
		line, err := out.ReadBytes('\n')
		if err != nil {
			t.Fatalf("read: %v (stderr: %s)", err, stderr.String())
		}
		var a answer
		var env struct {
			JSONRPC string `json:"jsonrpc"`
		}
		if !json.Valid(line) || json.Unmarshal(line, &env) != nil || env.JSONRPC != "2.0" || json.Unmarshal(line, &a) != nil {
			t.Fatalf("stdout carried a line that is not a JSON-RPC message: %q", line)
		}
		a.raw = line
		return a
	}
	// exchange sends one request and wants its answer under wantID, byte for byte.
	exchange := func(line, wantID string) answer {
		t.Helper()
		send(line)
		a := recv()
		if string(a.ID) != wantID {
			t.Fatalf("sent id %s, answered under id %s: %s", wantID, a.ID, a.raw)
		}
		return a
	}
	call := func(id, tool, args string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`
	}
	refusal := func(a answer) (code, field string) {
		t.Helper()
		if a.Result == nil || !a.Result.IsError {
			t.Fatalf("want a tool error, got %s", a.raw)
		}
		var r struct{ Code, Field string }
		if err := json.Unmarshal(a.Result.StructuredContent, &r); err != nil {
			t.Fatalf("refusal %s: %v", a.Result.StructuredContent, err)
		}
		return r.Code, r.Field
	}

	exchange(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`, `0`)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	// Ids come back as sent.
	for _, id := range []string{`9007199254740993`, `-9007199254740993`, `1e400`, `"x\udbff"`, `"a\u2028<&>"`, `"é"`} {
		exchange(call(id, "fence_status", `{"intent":"wire:none"}`), id)
		exchange(`{"jsonrpc":"2.0","id":`+id+`,"method":"ping"}`, id)
	}

	// Ids MCP does not allow: refused under id null, not run.
	for _, c := range []struct{ id, intent string }{{`null`, "wire:null-id"}, {`true`, "wire:true-id"}, {`{"k":1}`, "wire:object-id"}, {`[1]`, "wire:array-id"}} {
		a := exchange(call(c.id, "fence_prepare", `{"intent":"`+c.intent+`","tool":"t"}`), `null`)
		if a.Error == nil || a.Error.Code != -32600 || !strings.Contains(a.Error.Message, "NOT run") {
			t.Errorf("tools/call with id %s: %s; want -32600 saying it was NOT run", c.id, a.raw)
		}
	}
	// No id: a notification, which nothing may answer; the next answer is the ping's.
	send(`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"wire:no-id","tool":"t"}}}`)
	exchange(`{"jsonrpc":"2.0","id":"sync","method":"ping"}`, `"sync"`)

	// Text a decoder would change, and other bad arguments: invalid_request naming the member.
	for _, c := range []struct{ name, args, field string }{
		{"invalid UTF-8", "{\"intent\":\"wire:\xff\",\"tool\":\"t\"}", "intent"},
		{"lone surrogate", `{"intent":"wire:\ud800","tool":"t"}`, "intent"},
		{"member given twice", `{"intent":"wire:twice","intent":"wire:other","tool":"t"}`, "intent"},
		{"member twice inside args", `{"intent":"wire:args-twice","tool":"t","args":{"to":"a","to":"b"}}`, "args"},
		{"NUL in intent", `{"intent":"wire:\u0000","tool":"t"}`, "intent"},
		{"wait_secs past 60", `{"intent":"wire:w","tool":"t","wait_secs":61}`, "wait_secs"},
		{"wait_secs a string", `{"intent":"wire:w","tool":"t","wait_secs":"5"}`, "wait_secs"},
		{"unknown member", `{"intent":"wire:u","tool":"t","intnet":"x"}`, "arguments"},
	} {
		code, field := refusal(exchange(call(`"bad"`, "fence_prepare", c.args), `"bad"`))
		if code != "invalid_request" || field != c.field {
			t.Errorf("%s: code %q field %q; want invalid_request naming %q", c.name, code, field, c.field)
		}
	}

	// Numbers beyond 2^53 and float64, and control characters, survive prepare, commit and replay.
	args := `{"n":9007199254740993,"m":1e400}`
	result := `{"r":1e400,"k":-9007199254740993,"s":"\u2028\u0007\u001b[2J"}`
	a := exchange(call(`1`, "fence_prepare", `{"intent":"wire:big","tool":"t\u001b[31m","args":`+args+`}`), `1`)
	var fresh struct {
		Status string          `json:"status"`
		Ticket json.RawMessage `json:"ticket"`
	}
	if a.Result == nil || a.Result.IsError || json.Unmarshal(a.Result.StructuredContent, &fresh) != nil || fresh.Status != "fresh" {
		t.Fatalf("prepare with numbers beyond float64: %s", a.raw)
	}
	if a := exchange(call(`2`, "fence_commit", `{"ticket":`+string(fresh.Ticket)+`,"result":`+result+`}`), `2`); a.Result == nil || a.Result.IsError {
		t.Fatalf("commit of a result with numbers beyond float64: %s", a.raw)
	}
	a = exchange(call(`3`, "fence_prepare", `{"intent":"wire:big","tool":"t\u001b[31m","args":{"m":1e400,"n":9007199254740993}}`), `3`)
	var done struct {
		Status string `json:"status"`
		Cert   struct {
			Result json.RawMessage `json:"result"`
		} `json:"cert"`
	}
	if a.Result == nil || json.Unmarshal(a.Result.StructuredContent, &done) != nil || done.Status != "already_done" {
		t.Fatalf("duplicate prepare: %s", a.raw)
	}
	var want bytes.Buffer
	if err := json.Compact(&want, []byte(result)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(done.Cert.Result, want.Bytes()) {
		t.Errorf("the duplicate received result %s; want %s exactly", done.Cert.Result, want.Bytes())
	}

	// Nothing refused above reached the ledger.
	for _, intent := range []string{"wire:null-id", "wire:true-id", "wire:object-id", "wire:array-id", "wire:no-id", "wire:twice", "wire:other", "wire:args-twice", "wire:w", "wire:u"} {
		a := exchange(call(`"st"`, "fence_status", `{"intent":"`+intent+`"}`), `"st"`)
		if a.Result == nil || a.Result.IsError || !strings.Contains(string(a.Result.StructuredContent), `"state":"none"`) {
			t.Errorf("%s: %s; want state none: it was refused, not run", intent, a.raw)
		}
	}

	stdin.Close()
	rest, _ := io.ReadAll(out)
	if len(bytes.TrimSpace(rest)) != 0 {
		t.Errorf("stdout carried more after the last answer: %q", rest)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve exit: %v (stderr: %s)", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "without an id") {
		t.Errorf("stderr does not say the tools/call without an id was not run:\n%s", stderr.String())
	}
	if strings.Contains(stderr.String(), "panic") {
		t.Errorf("stderr mentions a panic:\n%s", stderr.String())
	}
}
