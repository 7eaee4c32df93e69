package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestLedgerExportAndVerifyOnAFullDiskWithNoHolder: a full disk is when an operator wants to
// copy the receipts off it. export and verify read the ledger at rest, as ls does (a killed
// wrap's claim in the log only, no process holding the ledger): the export holds both records
// and its end line counts what it holds, the export verifies, verify of the ledger still finds
// a record filed under another state than it says (its filing check), and reports what it
// reports once there is room again; nothing on the disk changes. Before, both opened the
// ledger for writing and failed for want of room.
func TestLedgerExportAndVerifyOnAFullDiskWithNoHolder(t *testing.T) {
	t.Parallel()
	fd := killedOnAFullDisk(t, func(path string) {
		// The completed call's record filed under another state than it says: damage only
		// verify's filing check sees.
		sqliteExec(t, path, "UPDATE records SET state = 'failed' WHERE state = 'done'")
	})
	before := filesIn(t, fd.disk)
	env := []string{store.EnvLedger + "=", "NO_COLOR=1"}

	r := runBinary(t, env, "", "ledger", "export", "--ledger", fd.ledger)
	if r.code != 0 || !strings.Contains(r.stderr, "read-only") || !strings.Contains(r.stderr, "no room left") {
		t.Fatalf("ledger export on a full disk: exit %d; want 0, read at rest and saying so\n%s%s", r.code, r.stdout, r.stderr)
	}
	var records []fence.Record
	var end *ledger.ExportEnd
	events := 0
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	for i, s := range lines {
		var l ledger.ExportLine
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatalf("export line %d: %v: %s", i+1, err, s)
		}
		switch {
		case l.Record != nil:
			records = append(records, *l.Record)
		case l.Event != nil:
			events++
		case l.End != nil && i == len(lines)-1:
			end = l.End
		default:
			t.Errorf("export line %d is neither a record, an event nor the last line's end: %s", i+1, s)
		}
	}
	claimed := slices.IndexFunc(records, func(rec fence.Record) bool { return rec.Intent == fd.claim.Intent })
	if len(records) != 2 || claimed < 0 || records[claimed].State != fence.StateInFlight {
		t.Errorf("the export read at rest holds %d record(s); want the completed call's and the killed call's claim (%s), in flight", len(records), fd.claim.Intent)
	}
	if end == nil || end.Records != len(records) || end.Events != events {
		t.Errorf("the export's end line %+v; want it last, counting its %d record(s) and %d event(s)", end, len(records), events)
	}
	if v := runBinary(t, env, r.stdout, "ledger", "verify", "--export", "-"); v.code != 0 || !strings.Contains(v.stdout, "all certs verify") {
		t.Errorf("ledger verify --export of the export read at rest: exit %d; want 0\n%s%s", v.code, v.stdout, v.stderr)
	}

	atRest := runBinary(t, env, "", "ledger", "verify", "--ledger", fd.ledger)
	if atRest.code != exitError || !strings.Contains(atRest.stdout, `the record is done but filed as "failed"`) || !strings.Contains(atRest.stdout, "2 record(s)") ||
		!strings.Contains(atRest.stderr, "read-only") {
		t.Errorf("ledger verify on a full disk: exit %d; want 1, read at rest, finding the record filed as failed\n%s%s", atRest.code, atRest.stdout, atRest.stderr)
	}
	if after := filesIn(t, fd.disk); !slices.Equal(before, after) {
		t.Errorf("export and verify changed what is on the full disk:\nbefore %q\nafter  %q", before, after)
	}

	if err := os.Remove(fd.filler); err != nil {
		t.Fatal(err)
	}
	usual := runBinary(t, env, "", "ledger", "verify", "--ledger", fd.ledger)
	if usual.code != atRest.code || usual.stdout != atRest.stdout || strings.Contains(usual.stderr, "read-only") {
		t.Errorf("ledger verify with room again (exit %d) reports otherwise than read at rest (exit %d):\n%s%s\nread at rest:\n%s", usual.code, atRest.code, usual.stdout, usual.stderr, atRest.stdout)
	}
}
