package wrap_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docs/wrap.md and the "send initialize again to retry" wrap answers: after the server failed
// to start, a call is answered that it was not sent (and leaves nothing in the ledger that
// would fence it), and a re-sent initialize starts the server again. The call then runs once
// and its duplicate is replayed.
func TestInitializeAgainAfterAFailedStart(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	mark := filepath.Join(r.dir, "started-once")
	script := filepath.Join(r.dir, "server.sh")
	body := "#!/bin/sh\nif [ -e '" + mark + "' ]; then exec '" + testExe + "' '-test.run=^$'; fi\n" +
		"touch '" + mark + "'\necho 'first start: the database is not up yet' >&2\nexit 3\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	r.childCmdOverride = []string{script}
	rw := r.rawWrap()
	// The server's own words, or how it ended: which one wrap meets first is a race (its
	// handshake write can fail with a broken pipe before the exit status is known).
	if got := rw.roundTrip(t, initLine); !strings.Contains(got, `"error"`) || !strings.Contains(got, "did not start") ||
		!(strings.Contains(got, "exit status 3") || strings.Contains(got, "the database is not up yet")) {
		t.Fatalf("the failed start: %s", got)
	}
	const charge = `{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":"charge","arguments":{"amount":9}}}`
	line := func(id string) string { return strings.Replace(charge, "%s", id, 1) }
	if got := rw.roundTrip(t, line("1")); !strings.Contains(got, "did not start") || !strings.Contains(got, "initialize again") {
		t.Fatalf("a call before the server started: %s", got)
	}
	if got := rw.roundTrip(t, strings.Replace(initLine, `"id":0`, `"id":2`, 1)); !strings.Contains(got, `"result"`) || !strings.Contains(got, `"serverInfo"`) {
		t.Fatalf("initialize sent again: %s\nstderr: %s", got, rw.log.String())
	}
	rw.send(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	first := rw.roundTrip(t, line("3"))
	if !strings.Contains(first, "charged 9") || strings.Contains(first, "effectfence/replayed") {
		t.Fatalf("the call after the restart did not run: %s", first)
	}
	if again := rw.roundTrip(t, line("4")); !strings.Contains(again, "charged 9") || !strings.Contains(again, `"effectfence/replayed":true`) {
		t.Fatalf("the duplicate was not replayed: %s", again)
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
}
