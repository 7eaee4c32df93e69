package main

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/syncbuf"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// TestWrapNamesTheCopyOfADeletedLedger: a wrap whose ledger file is deleted while it runs (a
// cleanup of the state directory) and that then ends without another call copies every
// receipt it holds beside the path when it records its counters at exit, and says where on
// stderr; the copy replays the call.
func TestWrapNamesTheCopyOfADeletedLedger(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var errw syncbuf.Buffer
	code := make(chan int, 1)
	go func() {
		code <- run(context.Background(), []string{"effectfence", "wrap", "--ledger", path, "--", effectfence(t), "demo-server", "--latency", "0s",
			"--effects", filepath.Join(t.TempDir(), "effects")}, streams{inR, outW, &errw})
		outW.Close()
	}()
	out := bufio.NewScanner(outR)
	ask := func(line string) string {
		t.Helper()
		if _, err := io.WriteString(inW, line+"\n"); err != nil {
			t.Fatal(err)
		}
		if !out.Scan() {
			t.Fatalf("no answer to %s; stderr:\n%s", line, errw.String())
		}
		return out.Text()
	}
	ask(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if _, err := io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if res := ask(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900}}}`); !strings.Contains(res, `"result"`) {
		t.Fatalf("the call: %s", res)
	}
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	inW.Close()
	go io.Copy(io.Discard, outR)
	if c := <-code; c != exitOK {
		t.Fatalf("wrap exit %d; stderr:\n%s", c, errw.String())
	}
	copies, _ := filepath.Glob(path + ".rescued-*")
	if len(copies) != 1 || !strings.Contains(errw.String(), "closing the ledger") || !strings.Contains(errw.String(), copies[0]) {
		t.Fatalf("copies %v; wrap's stderr:\n%s", copies, errw.String())
	}
	st, err := sqlite.Open(context.Background(), copies[0], sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n := 0
	err = st.View(context.Background(), func(tx fence.Tx) error {
		return tx.Scan(fence.Filter{States: []fence.State{fence.StateDone}}, func(r *fence.Record) bool {
			n += strings.Count(r.Tool, "charge_card")
			return true
		})
	})
	if err != nil || n != 1 {
		t.Fatalf("the copy holds %d done charge_card records (%v); want the one call", n, err)
	}
}
