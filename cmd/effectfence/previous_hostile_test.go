package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store"
)

// previousBuildReadsHostileResults: the previous build (prev, compiled from git history by
// TestPreviousBuildKeepsReceipts or its PostgreSQL twin), given a ledger this build wrote,
// reads every hostile result (fencetest.HostileResults) as this build committed it. Its
// `ledger export` carries each exact result in result_bytes under the hash this build
// recorded, and its `ledger verify` finds every cert sound. This build stores a done record without a result_bytes that
// repeats result, which the previous build reads through its own decoding of the record.
func previousBuildReadsHostileResults(t *testing.T, prev, ledger string) {
	ctx := context.Background()
	l, err := store.Open(ctx, store.Options{Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	eng := l.Engine
	type want struct {
		name  string
		exact []byte
		hash  string
	}
	wants := map[string]want{}
	for i, tc := range fencetest.HostileResults() {
		if strings.HasPrefix(tc.Name, "nested ") && tc.Name != "nested 1000" && tc.Name != "nested 9997" {
			// The previous build writes as readable result any valid result, however deep:
			// its export line of a result nested 9,998 levels or more is over encoding/json's
			// limit (and at 10,000 it cannot write the cert at all), whatever the ledger holds.
			continue
		}
		r := fence.Request{Intent: fmt.Sprintf("hostile:%02d", i), Tool: "t", Args: []byte(`{"case":` + fmt.Sprint(i) + `}`), Agent: "agent-a"}
		adm, err := eng.Prepare(ctx, r)
		if err != nil || adm.Ticket == nil {
			t.Fatalf("%s: prepare: %+v %v", tc.Name, adm, err)
		}
		c, err := eng.Commit(ctx, *adm.Ticket, tc.Result)
		if err != nil {
			t.Fatalf("%s: commit: %v", tc.Name, err)
		}
		wants[r.Intent] = want{tc.Name, c.Result, c.Hash}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	var stderr bytes.Buffer
	cmd := exec.Command(prev, "ledger", "export", "--ledger", ledger)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("previous build's ledger export: %v\n%s", err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 64<<20)
	seen := 0
	for sc.Scan() {
		var l struct {
			Record *struct {
				Intent string `json:"intent"`
				Cert   *struct {
					Hash        string `json:"hash"`
					ResultBytes []byte `json:"result_bytes"`
				} `json:"cert"`
			} `json:"record"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("previous build's export line %.200s: %v", sc.Bytes(), err)
		}
		if l.Record == nil {
			continue
		}
		w, ok := wants[l.Record.Intent]
		if !ok || l.Record.Cert == nil {
			t.Fatalf("previous build's export has record %s, cert %v", l.Record.Intent, l.Record.Cert)
		}
		seen++
		if !bytes.Equal(l.Record.Cert.ResultBytes, w.exact) || l.Record.Cert.Hash != w.hash {
			t.Errorf("%s: the previous build reads result %.200q hash %s; this build recorded %.200q %s", w.name, l.Record.Cert.ResultBytes, l.Record.Cert.Hash, w.exact, w.hash)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != len(wants) {
		t.Fatalf("the previous build exported %d records, want %d", seen, len(wants))
	}
	if out, err := exec.Command(prev, "ledger", "verify", "--ledger", ledger).CombinedOutput(); err != nil {
		t.Fatalf("previous build's ledger verify: %v\n%s", err, out)
	}
}
