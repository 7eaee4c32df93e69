package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestDocumentedVerifierOnExportedCerts runs the Python verifier printed in docs/CERTS.md on
// certs the real binary records: `effectfence serve` on a SQLite file, calls with hostile
// arguments and results, and the certs read back with `effectfence ledger export`. Each
// verifies; a tampered one does not.
func TestDocumentedVerifierOnExportedCerts(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("skipping: python3 is not installed")
	}
	doc, err := os.ReadFile("../../docs/CERTS.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```python\n")
	script, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/CERTS.md has no python block")
	}
	deep := strings.Repeat(`[{"k":`, (fence.MaxNesting-2)/2) + `-0` + strings.Repeat(`}]`, (fence.MaxNesting-2)/2)
	calls := []struct{ args, result string }{
		{`{"amount":9007199254740993,"rate":0.10000000000000000555,"neg":-0,"n":[1.0,1e21,123456789012345678901234,4.9e3,-25e-9]}`, `{"ok":true}`},
		{`{"name":"\u00e9e\u0301\ud83d\ude00\n<>&\u2028\u2029\u0001\u007f\/","z":{"\ue000":1,"\ud83d\ude00":2,"a":{}}}`, `{"content":[{"type":"text","text":"cut \ud83d"}], "structuredContent":{"k":1,"k":2}}`},
		{`{"d":` + deep + `}`, `[` + deep + `]`},
	}

	path := filepath.Join(t.TempDir(), "ledger.db")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, effectfence(t), "serve", "--ledger", path)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0", "NO_COLOR=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReaderSize(outPipe, 1<<20)
	answer := func(id int, line string) json.RawMessage {
		t.Helper()
		if _, err := in.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		for {
			b, err := out.ReadBytes('\n')
			if err != nil {
				t.Fatalf("reading serve's answer %d: %v\nstderr %s", id, err, stderr.String())
			}
			var m struct {
				ID     int `json:"id"`
				Result struct {
					IsError           bool            `json:"isError"`
					StructuredContent json.RawMessage `json:"structuredContent"`
				} `json:"result"`
			}
			if json.Unmarshal(b, &m) == nil && m.ID == id {
				if m.Result.IsError || m.Result.StructuredContent == nil {
					t.Fatalf("call %d: %.500s", id, b)
				}
				return m.Result.StructuredContent
			}
		}
	}
	if _, err := in.Write([]byte(serveSession())); err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		prep := answer(2*i+1, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"fence_prepare","arguments":{"intent":"doc-%d","tool":"t","agent":"a","domain":"d","args":%s}}}`, 2*i+1, i, c.args))
		var p struct {
			Status string          `json:"status"`
			Ticket json.RawMessage `json:"ticket"`
		}
		if json.Unmarshal(prep, &p) != nil || p.Status != "fresh" {
			t.Fatalf("prepare %d: %.500s", i, prep)
		}
		answer(2*i+2, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"fence_commit","arguments":{"ticket":%s,"result":%s}}}`, 2*i+2, p.Ticket, c.result))
	}
	in.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("serve: %v\n%s", err, stderr.String())
	}

	r := runBinary(t, []string{store.EnvLedger + "=" + path}, "", "ledger", "export")
	if r.code != exitOK {
		t.Fatalf("ledger export: exit %d\n%s", r.code, r.stderr)
	}
	verify := func(cert []byte) string {
		cmd := exec.Command(py, "-c", script)
		cmd.Stdin = bytes.NewReader(cert)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("python: %v\n%.2000s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	certs := 0
	for line := range strings.SplitSeq(strings.TrimSpace(r.stdout), "\n") {
		var l struct {
			Record *struct {
				Cert json.RawMessage `json:"cert"`
			} `json:"record"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("export line: %v", err)
		}
		if l.Record == nil || len(l.Record.Cert) == 0 {
			continue
		}
		certs++
		if got := verify(l.Record.Cert); got != "ok" {
			t.Fatalf("the documented verifier on an exported cert: %s\n%.300s", got, l.Record.Cert)
		}
		tampered := bytes.Replace(l.Record.Cert, []byte(`"agent":"a"`), []byte(`"agent":"b"`), 1)
		if got := verify(tampered); got != "MISMATCH" {
			t.Fatalf("the documented verifier on a tampered cert: %s", got)
		}
	}
	if certs != len(calls) {
		t.Fatalf("export holds %d certs, want %d:\n%.1000s", certs, len(calls), r.stdout)
	}
}
