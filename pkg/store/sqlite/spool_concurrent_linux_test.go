//go:build linux

package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/fence/fencetest"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// docs/ledger.md, the spool: outcomes the ledger did not take wait in files beside it, and the
// next process to open the ledger records them. Several processes open one ledger at once
// (agents started together after an outage), each draining the spool, while the process that
// spooled one of the outcomes still retries it. Every outcome must be recorded once, as it
// was reported: no commit refused as late, none recorded twice, no spool file left, no error
// for any process, and the retrying holder answered with its own cert.
func TestConcurrentDrainsRecordEachOutcomeOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	spoolDir := path + ".spool"
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fs := &fencetest.DownStore{Store: st}
	eng := fence.New(fs, fence.Config{SpoolDir: spoolDir, LeaseTTL: time.Hour})
	defer eng.Close()

	// Thirty claims of this process; their outcomes come while the ledger fails, and all but
	// the last are given up to the spool (Settle's context ends at once).
	const n = 30
	type claim struct {
		intent string
		kind   fence.OutcomeKind
		result string
		ticket fence.Ticket
	}
	claims := make([]claim, n)
	for i := range claims {
		c := claim{intent: fmt.Sprintf("drain:%02d", i), kind: fence.OutcomeCommit, result: fmt.Sprintf(`{"charge":"ch_%02d"}`, i)}
		if i%7 == 3 {
			c.kind, c.result = fence.OutcomeRelease, ""
		}
		adm, err := eng.Prepare(ctx, fence.Request{Intent: c.intent, Tool: "charge", Args: []byte(fmt.Sprintf(`{"n":%d}`, i))})
		if err != nil || !adm.Fresh() {
			t.Fatalf("prepare %s: %+v %v", c.intent, adm, err)
		}
		c.ticket = *adm.Ticket
		claims[i] = c
	}
	outcome := func(c claim) fence.Outcome {
		o := fence.Outcome{Kind: c.kind, Ticket: c.ticket}
		if c.kind == fence.OutcomeCommit {
			o.Result = []byte(c.result)
		} else {
			o.Reason = "the tool said no"
		}
		return o
	}
	fs.Down.Store(true)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range claims[:n-1] {
		if _, err := eng.Settle(gone, outcome(c)); !errors.As(err, new(fence.SpooledError)) {
			t.Fatalf("settle %s with the ledger down: %v; want it spooled", c.intent, err)
		}
	}
	// The last one's holder keeps retrying (its ledger is down until the others have drained).
	last := claims[n-1]
	type answer struct {
		cert *fence.Cert
		err  error
	}
	retried := make(chan answer, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cert, err := eng.Settle(sctx, outcome(last))
		retried <- answer{cert, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if files, _ := fence.SpoolFiles(spoolDir); len(files) == n {
			break
		}
		if time.Now().After(deadline) {
			files, err := fence.SpoolFiles(spoolDir)
			t.Fatalf("spool holds %d files (%v); want %d", len(files), err, n)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Four processes open the ledger at one word, and this process drains beside them.
	const procs = 4
	ins := make([]io.WriteCloser, procs)
	outs := make([]func() string, procs)
	var hung []*exec.Cmd
	for i := range ins {
		cmd, in, out := startSelf(t, []string{"EFFECTFENCE_TEST_OPEN_LEDGER=" + path, "EFFECTFENCE_TEST_OPEN_WAIT=1"})
		hung = append(hung, cmd)
		ins[i] = in
		outs[i] = func() string {
			if !out.Scan() {
				return fmt.Sprintf("ended: %v", out.Err())
			}
			return out.Text()
		}
	}
	for _, in := range ins {
		if _, err := io.WriteString(in, "go\n"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var drainErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		l, err := store.Open(ctx, store.Options{Ledger: path, RecoverEvery: time.Hour})
		if err == nil {
			err = l.Close()
		}
		drainErr = err
	}()
	// A process that never answers (a drain waiting for ever on the spool's lock) is killed
	// after two minutes: its line then says how it ended.
	stop := time.AfterFunc(2*time.Minute, func() {
		for _, c := range hung {
			_ = c.Process.Kill()
		}
	})
	said := make([]string, procs)
	for i := range outs {
		said[i] = outs[i]()
	}
	stop.Stop()
	wg.Wait()
	for i, s := range said {
		if s != "opened" {
			t.Errorf("process %d said %q; want opened", i, s)
		}
	}
	if drainErr != nil {
		t.Errorf("this process's open, draining beside them: %v", drainErr)
	}

	// The holder's ledger answers again: its retry finds its commit recorded by another
	// process and answers with that cert, as if its own write had landed.
	fs.Down.Store(false)
	var got answer
	select {
	case got = <-retried:
	case <-time.After(30 * time.Second):
		t.Fatal("the retrying settle did not return within 30 s of the ledger answering")
	}
	if got.err != nil || got.cert == nil || string(got.cert.Result) != last.result {
		t.Errorf("the retrying holder: cert %+v, %v; want its own commit's cert", got.cert, got.err)
	}

	if files, err := fence.SpoolFiles(spoolDir); err != nil || len(files) != 0 {
		t.Errorf("spool after the drains: %v %v; want empty", files, err)
	}
	for _, c := range claims {
		var rec *fence.Record
		if err := eng.Store().View(ctx, func(tx fence.Tx) error {
			var err error
			rec, err = tx.Get(c.intent)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		kinds := eventKinds(t, eng, c.intent)
		if slices.Contains(kinds, fence.EventLateResult) || slices.Contains(kinds, fence.EventStale) {
			t.Errorf("%s: events %v; an outcome was refused", c.intent, kinds)
		}
		switch c.kind {
		case fence.OutcomeCommit:
			if rec == nil || rec.State != fence.StateDone || rec.Cert == nil || string(rec.Cert.Result) != c.result {
				t.Errorf("%s: record %+v; want done with %s", c.intent, rec, c.result)
			}
		case fence.OutcomeRelease:
			if rec != nil && rec.State != fence.StateNone {
				t.Errorf("%s: record in state %s after its release; want free (events %v)", c.intent, rec.State, kinds)
			}
			if n := count(kinds, fence.EventRelease); n != 1 {
				t.Errorf("%s: %d release events (%v); want 1", c.intent, n, kinds)
			}
		}
	}
	t.Logf("events of a commit: %v; of a release: %v", eventKinds(t, eng, claims[0].intent), eventKinds(t, eng, claims[3].intent))
}

func count(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}
