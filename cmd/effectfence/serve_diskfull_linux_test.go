package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/diskfull"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestServeCommitHeldInMemoryIsRecordedWhileServeRuns is docs/serve.md's "A store_error without
// spooled (the spool could not take it either; the message says it is held in the process's
// memory) is kept only while this serve process runs: retry the same call", on a real full
// disk under both the SQLite ledger and its spool. The agent's commit is answered store_error,
// without spooled, saying the outcome is held in memory and to retry. Once the disk has room
// the serve process records it by itself (its Recover, every 10 s), with no retry from the
// agent: a duplicate in another serve process receives the result, and the agent's retried
// commit gets the recorded cert.
func TestServeCommitHeldInMemoryIsRecordedWhileServeRuns(t *testing.T) {
	t.Parallel()
	disk := diskfull.Mount(t, 8<<20)
	ledger := filepath.Join(disk, "ledger.db")
	const prep = `{"intent":"charge:o-11","tool":"charge_card","args":{"amount":1100}}`
	s := startServe(t, "--ledger", ledger)
	p := s.prepare(prep)
	if p.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", p)
	}
	filler := diskfull.Fill(t, disk)
	commit := `{"ticket":` + ticketJSON(t, p.Ticket) + `,"result":{"charge":"ch_11"}}`
	r := s.refused(serve.ToolCommit, commit)
	if r.Code != fence.CodeStore || r.Spooled != "" || !strings.Contains(r.Message, "held in this process's memory") || !strings.Contains(r.Next, "Retry the same call") {
		t.Fatalf("a commit with the ledger and its spool on a full disk: %+v; want store_error, no spool file, held in memory, retry the same call", r)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	n := startServe(t, "--ledger", ledger)
	deadline := time.Now().Add(60 * time.Second)
	for {
		raw, isErr := n.call(serve.ToolPrepare, prep)
		var d serve.PrepareResult
		if !isErr {
			if json.Unmarshal(raw, &d) != nil || d.Status != serve.StatusAlreadyDone || d.Cert == nil || string(d.Cert.Result) != `{"charge":"ch_11"}` {
				t.Fatalf("a duplicate once the disk had room: %s; want the held result", raw)
			}
			break
		}
		var rf serve.Refusal
		if json.Unmarshal(raw, &rf) != nil || rf.Code != fence.CodeInFlight {
			t.Fatalf("a duplicate while the outcome is held: %s; want intent_in_flight (the holder is alive)", raw)
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after the disk had room, the held outcome is still not recorded\nserve's stderr: %s", s.stderr.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
	raw, isErr := s.call(serve.ToolCommit, commit)
	var c serve.CommitResult
	if isErr || json.Unmarshal(raw, &c) != nil || c.Cert == nil || string(c.Cert.Result) != `{"charge":"ch_11"}` {
		t.Fatalf("the agent's retried commit: %s; want the recorded cert", raw)
	}
}
