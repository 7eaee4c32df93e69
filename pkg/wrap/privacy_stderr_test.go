package wrap_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestRedactedValueTheServerStoppedWritingNotInReasons: the server dies half way through
// writing the request on its stderr, so the end of what it wrote is the beginning of the
// redacted value (docs/privacy.md: "its beginning where the server stopped writing it"). That
// beginning must not reach the ledger.
func TestRedactedValueTheServerStoppedWritingNotInReasons(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const value, first = "QXJZKWVMPRYTGHLN", "QXJZKWVM"
	// The server's line is `mcptest: dying on tools/call {"arguments":{"tag":"VALUE","cut":34},"name":"die"}`
	// and a newline; it leaves out its last 34 bytes, the value's last 8 and what follows.
	cut := len(value) - len(first) + len(`","cut":34},"name":"die"}`) + 1
	w := r.wrap("--redact", "die:tag")
	res := call(t, w.Session, "die", `{"tag":"`+value+`","cut":`+strconv.Itoa(cut)+`}`)
	if !res.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	w.Close()

	ledgerFilesLack(t, r, first)
	intent := res.intent()
	rec, err := r.openLedger().Status(context.Background(), intent)
	if err != nil || rec.State != fence.StateUnknown || !strings.HasSuffix(rec.Reason, "\n"+`mcptest: dying on tools/call {"arguments":{"tag":"[redacted]`) {
		t.Fatalf("record of %q: %+v, %v; want an unknown outcome whose reason ends with the server's words and [redacted] for the value's beginning", intent, rec, err)
	}
	for k := 1; k <= len(first); k++ {
		if strings.Contains(rec.Reason, `"tag":"`+first[:k]) {
			t.Fatalf("the reason holds the value's first %d bytes: %s", k, rec.Reason)
		}
	}
}

// TestStderrLeftOutPastTheRedactedValuesItCanHide: wrap keeps up to 1 MiB of the redacted
// values sent to one server process, to take them out of the end of its stderr; past that it
// leaves the stderr out of a reason whole (docs/privacy.md). Three calls of 400 KB values are
// logged by the server, which then dies on a call that redacts nothing: the end of its stderr
// holds the third value's last bytes, and the reason must say the stderr was not shown.
func TestStderrLeftOutPastTheRedactedValuesItCanHide(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--redact", "slow:tag")
	var secrets []string
	for range 3 {
		b := make([]byte, 400_000)
		for i := range b {
			b[i] = 'A' + byte(rand.IntN(26))
		}
		secrets = append(secrets, string(b))
		if res := call(t, w.Session, "slow", `{"tag":"`+string(b)+`","ms":1}`); res.IsError {
			t.Fatalf("slow: %s", res.text())
		}
	}
	res := call(t, w.Session, "die", `{"tag":"plain"}`)
	if !res.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	w.Close()

	intent := res.intent()
	rec, err := r.openLedger().Status(context.Background(), intent)
	if err != nil || rec.State != fence.StateUnknown || !strings.Contains(rec.Reason, "not shown: more argument values to keep out of it were sent to this server than are kept") {
		t.Fatalf("record of %q: %+v, %v; want an unknown outcome whose reason leaves the server's stderr out", intent, rec, err)
	}
	for i, s := range secrets {
		// Any 32 bytes of a value: the end of the stderr holds the third one's last bytes.
		for _, part := range []string{s[:32], s[len(s)/2 : len(s)/2+32], s[len(s)-32:]} {
			if strings.Contains(rec.Reason, part) {
				t.Fatalf("the reason holds part of value %d: %s", i, rec.Reason)
			}
			ledgerFilesLack(t, r, part)
		}
	}
	if strings.Contains(res.text(), secrets[2][len(secrets[2])-32:]) {
		t.Fatalf("the answer to the dying call shows another call's redacted value: %.300s", res.text())
	}
}
