package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// TestServeOutcomeDuringALedgerFailureIsSpooled: the agent ran its effect and reports it while
// serve's SQLite ledger cannot take it (the file moved aside under the running process). Before,
// fence_commit answered store_error at once and kept nothing: an agent that then gave up, or
// whose serve process was killed, lost the outcome it had handed to the fence, and the intent
// stayed fenced as unknown for an operator. Now serve settles it as wrap does: retried, then
// kept in the ledger's spool, and the refusal says where (spooled). The process is killed,
// the ledger put back: the next serve process records it, so a duplicate receives the
// agent's result (commit) or runs (release), and the agent's retried commit gets the cert.
// With the holder alive and a 1 s lease ("commit-holder-alive"), a duplicate in another serve
// process right after the ledger is back, before any Recover, finds the claim lapsed: it
// records the spool first and receives the result (before: prior_failure, "tell a human
// operator to clear it", while the outcome sat in the spool).
func TestServeOutcomeDuringALedgerFailureIsSpooled(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"commit", "release", "commit-holder-alive"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ledger := filepath.Join(t.TempDir(), "ledger.db")
			const prep = `{"intent":"charge:o-9","tool":"charge_card","args":{"amount":4900}}`
			alive := kind == "commit-holder-alive"
			a := startServe(t, "--ledger", ledger, "--lease-secs", "1")
			var b *serveProc
			if alive { // started now: it has run its Recover at open, the next is 10 s away
				b = startServe(t, "--ledger", ledger, "--lease-secs", "1")
				b.call(serve.ToolStats, `{}`)
			}
			p := a.prepare(prep)
			if p.Status != serve.StatusFresh {
				t.Fatalf("first prepare: %+v", p)
			}
			if err := os.Rename(ledger, ledger+".away"); err != nil {
				t.Fatal(err)
			}
			tool, args := serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_9"}}`
			if kind == "release" {
				tool, args = serve.ToolRelease, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"reason":"card declined before charging"}`
			}
			r := a.refused(tool, args)
			if r.Code != fence.CodeStore || r.Spooled == "" {
				t.Fatalf("%s while the ledger is away: %+v; want store_error with the spool file named", tool, r)
			}
			if r.Executed != (kind != "release") {
				t.Fatalf("%s while the ledger is away: executed %v; want true only for a commit (the agent ran the effect)", tool, r.Executed)
			}
			if _, err := os.Stat(r.Spooled); err != nil {
				t.Fatalf("the spool file the refusal names: %v", err)
			}
			if !alive {
				a.kill9()
			}
			if err := os.Rename(ledger+".away", ledger); err != nil {
				t.Fatal(err)
			}
			if !alive {
				b = startServe(t, "--ledger", ledger)
			}
			if kind == "release" {
				if d := b.prepare(prep); d.Status != serve.StatusFresh {
					t.Fatalf("a duplicate after the spooled release: %+v; want it free to run", d)
				}
				return
			}
			d := b.prepare(prep)
			if d.Status != serve.StatusAlreadyDone || d.Cert == nil || !bytes.Contains(d.Cert.Result, []byte("ch_9")) {
				t.Fatalf("a duplicate after the spooled commit: %+v; want the agent's result", d)
			}
			if alive {
				// One prepare, one attempt, replayed: the refusal that had it record the spool
				// first is no answer of its own (before, it was counted too, as failed).
				var st serve.StatsResult
				if raw, isErr := b.call(serve.ToolStats, `{}`); isErr || json.Unmarshal(raw, &st) != nil {
					t.Fatalf("fence_stats: %s", raw)
				}
				if got, want := st.SinceBoot.Counters, (fence.Counters{Replayed: 1}); got != want {
					t.Errorf("the duplicate's serve counted %s, want %s", got.Line(), want.Line())
				}
			}
			raw, isErr := b.call(serve.ToolCommit, args)
			var c serve.CommitResult
			if isErr || json.Unmarshal(raw, &c) != nil || c.Cert == nil || c.Cert.Hash != d.Cert.Hash {
				t.Fatalf("the agent's retried commit: %s; want the recorded cert %s", raw, d.Cert.Hash)
			}
			if files, _ := fence.SpoolFiles(ledger + ".spool"); len(files) != 0 {
				t.Errorf("the spool still holds %v", files)
			}
		})
	}
}

// TestServeSpoolOfALedgerReachedThroughASymlink: docs/RELIABILITY.md says a symbolic link to
// the ledger file is no second name (SQLite follows it), and that a dead re-run-safe holder's
// claim is not taken over while its outcome waits in this host's spool. A serve process using
// the ledger through a link (--on-lease-expiry reclaim) commits while the file is moved aside:
// the outcome is spooled, and the process is killed. The file put back, a serve process using
// the file's own name must record that outcome and replay it. Before, the spool was kept
// beside the link's name (link.db.spool), which the second process never read: it took the
// claim over as a dead holder's with nothing spooled, and the effect ran a second time.
func TestServeSpoolOfALedgerReachedThroughASymlink(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ledger := filepath.Join(dir, "ledger.db")
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(ledger, link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	const prep = `{"intent":"charge:o-10","tool":"charge_card","args":{"amount":4900}}`
	a := startServe(t, "--ledger", link, "--lease-secs", "1", "--on-lease-expiry", "reclaim")
	p := a.prepare(prep)
	if p.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", p)
	}
	if err := os.Rename(ledger, ledger+".away"); err != nil {
		t.Fatal(err)
	}
	r := a.refused(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_10"}}`)
	if r.Code != fence.CodeStore || r.Spooled == "" {
		t.Fatalf("commit while the ledger is away: %+v; want store_error with the spool file named", r)
	}
	a.kill9()
	if err := os.Rename(ledger+".away", ledger); err != nil {
		t.Fatal(err)
	}
	b := startServe(t, "--ledger", ledger, "--on-lease-expiry", "reclaim")
	d := b.prepare(prep)
	if d.Status != serve.StatusAlreadyDone || d.Cert == nil || !bytes.Contains(d.Cert.Result, []byte("ch_10")) {
		t.Fatalf("a duplicate through the file's own name after the commit spooled through the link: %+v; want the agent's result, never a second run", d)
	}
}

// TestServeSpoolLeftBesideAMovedLedgerIsNotForgotten: a serve process's ledger is moved
// (mv OLD NEW) while it holds a claim; its commit finds the file gone and waits in the spool
// beside the old name (OLD.spool), and the process is killed. Before, a process using NEW
// opened it and never read OLD.spool: the claim of the dead holder went unknown, or, re-run
// safe, was taken over and the effect ran again. Now the ledger remembers it was used as OLD,
// so opening it as NEW is refused while outcomes wait in OLD.spool (and nothing else is at
// OLD), naming them and saying how to bring them along; moved into NEW.spool, they are
// recorded and a duplicate replays the result.
func TestServeSpoolLeftBesideAMovedLedgerIsNotForgotten(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old, moved := filepath.Join(dir, "old.db"), filepath.Join(dir, "new.db")
	const prep = `{"intent":"charge:o-11","tool":"charge_card","args":{"amount":4900}}`
	a := startServe(t, "--ledger", old, "--lease-secs", "1", "--on-lease-expiry", "reclaim")
	p := a.prepare(prep)
	if p.Status != serve.StatusFresh {
		t.Fatalf("first prepare: %+v", p)
	}
	if err := os.Rename(old, moved); err != nil {
		t.Fatal(err)
	}
	r := a.refused(serve.ToolCommit, `{"ticket":`+ticketJSON(t, p.Ticket)+`,"result":{"charge":"ch_11"}}`)
	if r.Code != fence.CodeStore || filepath.Dir(r.Spooled) != old+".spool" {
		t.Fatalf("commit after the ledger moved: %+v; want store_error, spooled in %s.spool", r, old)
	}
	a.kill9()

	out, err := exec.Command(effectfence(t), "ledger", "ls", "--ledger", moved).CombinedOutput()
	if err == nil || !bytes.Contains(out, []byte(old+".spool")) || !bytes.Contains(out, []byte(moved+".spool")) {
		t.Fatalf("ledger ls of the moved ledger while its outcome waits beside the old name: %v\n%s\nwant a refusal naming %s.spool and where to move it", err, out, old)
	}
	if err := os.MkdirAll(moved+".spool", 0o700); err != nil {
		t.Fatal(err)
	}
	files, err := fence.SpoolFiles(old + ".spool")
	if err != nil || len(files) != 1 {
		t.Fatalf("spool beside the old name: %v %v", files, err)
	}
	if err := os.Rename(filepath.Join(old+".spool", files[0]), filepath.Join(moved+".spool", files[0])); err != nil {
		t.Fatal(err)
	}
	b := startServe(t, "--ledger", moved, "--on-lease-expiry", "reclaim")
	d := b.prepare(prep)
	if d.Status != serve.StatusAlreadyDone || d.Cert == nil || !bytes.Contains(d.Cert.Result, []byte("ch_11")) {
		t.Fatalf("a duplicate once the outcome was brought beside the new name: %+v; want the agent's result", d)
	}
}
