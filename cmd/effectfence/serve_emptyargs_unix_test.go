//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// docs/serve.md: fence_prepare's args left out, null and {} are the same arguments. A retry
// in one form of an intent prepared in another is the same intent, through the real MCP
// TypeScript SDK client and the built serve: in flight while the first runs, a waiter and a
// duplicate get the first attempt's cert, whose args keep the first form, and fence_status
// takes the other form as proof. Before, each retry was refused intent_conflict, whose advice
// (a distinct intent) would have run the effect a second time. Other args still conflict.
func TestServeEmptyArgsAlikeThroughTheSDK(t *testing.T) {
	t.Parallel()
	onLedgers(t, emptyArgsAlikeThroughTheSDK)
}

func emptyArgsAlikeThroughTheSDK(t *testing.T, ledger string) {
	peers := peersDir(t)
	var rep struct {
		Cases []struct {
			First, Retry                                          string
			Prepared, InFlight, Commit, Waited, Duplicate, Status callOutcome
			Differs                                               callOutcome
		}
	}
	nodeReport(t, "serve_emptyargs.mjs", []string{"PEERS=" + peers, "EF_BIN=" + effectfence(t), "EF_LEDGER=" + ledger}, &rep)
	if len(rep.Cases) != 9 {
		t.Fatalf("%d cases reported, want 9", len(rep.Cases))
	}
	for _, c := range rep.Cases {
		step := func(s string) string { return fmt.Sprintf("args %s, then %s: %s", c.First, c.Retry, s) }
		if p := c.Prepared.prepared(t, step("first prepare")); p.Status != serve.StatusFresh {
			t.Fatalf("%s: %+v", step("first prepare"), p)
		}
		if r := c.InFlight.refusal(t, step("retry in flight")); r.Code != fence.CodeInFlight {
			t.Fatalf("%s: %+v; want intent_in_flight", step("retry in flight"), r)
		}
		var committed serve.CommitResult
		if c.Commit.IsError || json.Unmarshal(c.Commit.JSON, &committed) != nil || committed.Cert == nil {
			t.Fatalf("%s: %s", step("commit"), c.Commit.JSON)
		}
		want := map[string]string{"absent": "null", "null": "null", "empty": "{}"}[c.First]
		if string(committed.Cert.Args) != want {
			t.Fatalf("%s: the cert holds args %s; want %s, the first prepare's form", step("commit"), committed.Cert.Args, want)
		}
		for name, o := range map[string]callOutcome{"waiter": c.Waited, "duplicate": c.Duplicate} {
			p := o.prepared(t, step(name))
			if p.Status != serve.StatusAlreadyDone || p.Cert == nil || p.Cert.Hash != committed.Cert.Hash {
				t.Fatalf("%s: %+v; want already_done with cert %s", step(name), p, committed.Cert.Hash)
			}
		}
		var st serve.StatusResult
		if c.Status.IsError || json.Unmarshal(c.Status.JSON, &st) != nil || st.Intent == nil || st.Intent.Cert == nil || st.Intent.Withheld != "" {
			t.Fatalf("%s: %s; want the cert, shown for tool and args in the retry's form", step("status"), c.Status.JSON)
		}
		if r := c.Differs.refusal(t, step("prepare with other args")); r.Code != fence.CodeConflict {
			t.Fatalf("%s: %+v; want intent_conflict", step("prepare with other args"), r)
		}
	}
}
