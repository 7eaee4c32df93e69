package wrap_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// TestRedactAndKeepResultHash: with --redact and --keep-result TOOL=hash, the real wrap
// process keeps neither the redacted argument nor the result in its ledger files, and after
// a restart a duplicate is told when the call was done and that its result was not kept; it
// never runs again.
func TestRedactAndKeepResultHash(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const card = "4111111111111111"
	args := `{"amount":700,"order":"priv","note":"card ` + card + `"}`
	flags := []string{"--redact", "charge:note", "--keep-result", "charge=hash"}
	w := r.wrap(flags...)
	first := call(t, w.Session, "charge", args)
	var sc struct {
		ChargeID string `json:"charge_id"`
	}
	if first.IsError || first.replayed() || json.Unmarshal(first.StructuredContent, &sc) != nil || sc.ChargeID == "" {
		t.Fatalf("first call: %+v", first)
	}
	w.Close()

	files, _ := filepath.Glob(r.ledger + "*")
	if len(files) == 0 {
		t.Fatalf("no ledger files at %s", r.ledger)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{card, sc.ChargeID} {
			if holds(b, secret) {
				t.Fatalf("ledger file %s contains %q", f, secret)
			}
		}
	}

	w2 := r.wrap(flags...)
	dup := call(t, w2.Session, "charge", args)
	// charge has an output schema: the statement is marked isError, or an SDK client refuses it
	// (TestHashOnlyReplayOfAToolWithAnOutputSchema), and says why.
	if !dup.IsError || !strings.Contains(dup.text(), "output schema") || !dup.replayed() || string(dup.Meta["effectfence/result_not_kept"]) != "true" ||
		!strings.Contains(dup.text(), "NOT executed again") || !strings.Contains(dup.text(), "not kept") || strings.Contains(dup.text(), sc.ChargeID) {
		t.Fatalf("duplicate of a hash-only call: %+v %s", dup, dup.text())
	}
	if n := r.effectCount(); n != 1 {
		t.Fatalf("the charge ran %d times, want 1", n)
	}
	// A different card is a different call: it runs.
	other := call(t, w2.Session, "charge", strings.Replace(args, card, "5500000000000004", 1))
	if other.replayed() || r.effectCount() != 2 {
		t.Fatalf("a different redacted value must be a new call: %+v, %d effects", other, r.effectCount())
	}
}

func TestPrivacyFlagsRefused(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, bad := range [][]string{{"--keep-result", "charge=nothing"}, {"--keep-result", "charge"}, {"--redact", "charge"}, {"--redact", "charge:a..b"}} {
		if _, err := r.tryWrap(bad...); err == nil {
			t.Errorf("wrap %v started", bad)
		}
	}
}

// TestRedactedValueNotInReasons: a server that dies writes the request it died on to its
// stderr, and wrap records the end of that stderr as the unknown intent's reason. With the
// field redacted, the value must not reach the ledger that way either (docs/privacy.md:
// "redaction keeps the value off the disk"); the reason keeps the rest of what the server said.
func TestRedactedValueNotInReasons(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const secret = "s3cret-4111111111111111"
	w := r.wrap("--redact", "die:tag")
	res := call(t, w.Session, "die", `{"tag":"`+secret+`"}`)
	if !res.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	w.Close()

	ledgerFilesLack(t, r, secret)
	intent := res.intent()
	rec, err := r.openLedger().Status(context.Background(), intent)
	if err != nil || rec.State != fence.StateUnknown {
		t.Fatalf("record of %q: %+v, %v", intent, rec, err)
	}
	if reason := rec.Reason; !strings.Contains(reason, "dying on tools/call") || !strings.Contains(reason, `"tag":"[redacted]"`) {
		t.Fatalf("the reason should keep what the server said, without the value: %q", reason)
	}
}

// TestRedactedValueNotInARefusalsReason: the server refuses the call with a JSON-RPC error
// that repeats a redacted argument, and wrap records that message as the release's reason
// (docs/privacy.md: "a JSON-RPC error message ... every redacted value as the call gave it
// ... is replaced by [redacted] in those words before they are recorded"). The agent still
// gets the server's own words; the ledger keeps the rest of them, without the value.
func TestRedactedValueNotInARefusalsReason(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const secret = "4111111111111111"
	w := r.wrap("--redact", "fail:tag")
	_, err := callE(w.Session, "fail", `{"tag":"`+secret+`","echo":true}`)
	var rpc *mcpstdio.RPCError
	if !errors.As(err, &rpc) || !strings.Contains(rpc.Message, secret) {
		t.Fatalf("the server's refusal through wrap: %v; want its JSON-RPC error, as it wrote it", err)
	}
	w.Close()

	ledgerFilesLack(t, r, secret)
	var reasons []string
	err = r.openLedger().Store().View(context.Background(), func(tx fence.Tx) error {
		return tx.Events("", func(e fence.Event) bool {
			if e.Kind == fence.EventFailure { // a JSON-RPC error: a release of a failed call
				reasons = append(reasons, e.Reason)
			}
			return true
		})
	})
	if err != nil || len(reasons) != 1 || !strings.Contains(reasons[0], "declined: card [redacted] refused") {
		t.Fatalf("the release's recorded reason: %q, %v; want the server's words without the value", reasons, err)
	}
}

// ledgerFilesLack fails the test if any of the rig's ledger files (the database, its WAL and
// the rest beside it) holds secret.
func ledgerFilesLack(t *testing.T, r *rig, secret string) {
	t.Helper()
	files, _ := filepath.Glob(r.ledger + "*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if holds(b, secret) {
			t.Fatalf("ledger file %s contains the redacted value", f)
		}
	}
}

// holds reports whether b holds secret: as it is, or base64-encoded at any alignment (a record
// keeps the exact bytes of a call's arguments in base64, exact_args: a scan for the value in
// clear alone would miss them there).
func holds(b []byte, secret string) bool {
	if bytes.Contains(b, []byte(secret)) {
		return true
	}
	for k := range 3 {
		enc := base64.StdEncoding.EncodeToString(append(make([]byte, k), secret...))
		// The characters that depend on the secret's bytes alone: not the first group when
		// bytes before it share it, never the last (bytes after it, or padding).
		from := 0
		if k > 0 {
			from = 4
		}
		if core := enc[from : len(enc)-4]; len(core) >= 8 && bytes.Contains(b, []byte(core)) {
			return true
		}
	}
	return false
}

// TestRedactedValueNotInReasonsAsTheCallSpelledIt: the call spells the redacted value with
// JSON escapes of its own ("\u0033" for a digit, "\/" for a slash), and the server, dying,
// writes the request to its stderr as it received it: byte for byte, escapes included. The
// value must not reach the ledger in that spelling either (docs/privacy.md: "every redacted
// value as the call gave it").
func TestRedactedValueNotInReasonsAsTheCallSpelledIt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const spelled = `41112222\u003333334444 a\/b`
	const decoded = `411122223333334444 a/b`
	w := r.wrap("--redact", "die:tag")
	res := call(t, w.Session, "die", `{"tag":"`+spelled+`"}`)
	if !res.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	w.Close()

	ledgerFilesLack(t, r, decoded)
	ledgerFilesLack(t, r, spelled)
	ledgerFilesLack(t, r, `41112222\\u003333334444`) // as the JSON of a record writes it
	intent := res.intent()
	rec, err := r.openLedger().Status(context.Background(), intent)
	if err != nil || rec.State != fence.StateUnknown || !strings.Contains(rec.Reason, `"tag":"[redacted]"`) {
		t.Fatalf("record of %q: %+v, %v; want an unknown outcome whose reason keeps the server's words without the value", intent, rec, err)
	}
}

// TestRedactedValueOfAnEarlierCallNotInReasons: the server logs each call on its stderr (the
// test server's slow tool prints its tag), and later dies during another call, of a tool that
// redacts nothing. The end of its stderr, recorded as that call's reason, holds the earlier
// call's redacted value: it must not reach the ledger that way (docs/privacy.md: redaction
// keeps the value off the disk), whether the earlier call was fenced or passed through.
func TestRedactedValueOfAnEarlierCallNotInReasons(t *testing.T) {
	t.Parallel()
	for name, flags := range map[string][]string{"fenced": nil, "passed": {"--pass", "slow"}} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			earlierCallNotInReasons(t, flags)
		})
	}
}

func earlierCallNotInReasons(t *testing.T, flags []string) {
	r := newRig(t)
	const secret = "4111222233334444"
	w := r.wrap(append([]string{"--redact", "slow:tag"}, flags...)...)
	if res := call(t, w.Session, "slow", `{"tag":"`+secret+`","ms":1}`); res.IsError {
		t.Fatalf("slow: %+v", res)
	}
	res := call(t, w.Session, "die", `{"tag":"plain"}`)
	if !res.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	w.Close()

	ledgerFilesLack(t, r, secret)
	intent := res.intent()
	rec, err := r.openLedger().Status(context.Background(), intent)
	if err != nil || rec.State != fence.StateUnknown || !strings.Contains(rec.Reason, "slow tag=[redacted] started") || !strings.Contains(rec.Reason, `"tag":"plain"`) {
		t.Fatalf("record of %q: %+v, %v; want an unknown outcome whose reason keeps the server's words without the earlier call's value", intent, rec, err)
	}
	if strings.Contains(res.text(), secret) {
		t.Fatalf("the answer to the dying call shows another call's redacted value: %s", res.text())
	}
}

// TestRedactedValueCutByTheStderrTailNotInReasons: the request the server prints as it dies is
// longer than the 2 KiB of its stderr that wrap keeps, and the cut falls inside the redacted
// value: the tail begins with the value's last bytes. They must not reach the ledger either.
func TestRedactedValueCutByTheStderrTailNotInReasons(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const value, last = "QXJZKWVMPRYTGHLN", "PRYTGHLN"
	// The server prints `... {"arguments":{"tag":"VALUE","filler":"FILLER"},"name":"die"}` and
	// a newline: after the value come 29 bytes and the filler; 2048 kept bytes leave the
	// value's last 8.
	filler := strings.Repeat("x", 2048-29-len(last))
	w := r.wrap("--redact", "die:tag")
	res := call(t, w.Session, "die", `{"tag":"`+value+`","filler":"`+filler+`"}`)
	if !res.IsError {
		t.Fatalf("die must leave an unknown outcome: %+v", res)
	}
	w.Close()

	ledgerFilesLack(t, r, last)
	intent := res.intent()
	rec, err := r.openLedger().Status(context.Background(), intent)
	if err != nil || rec.State != fence.StateUnknown || !strings.Contains(rec.Reason, `its stderr ended with: [redacted]","filler":"xxx`) {
		t.Fatalf("record of %q: %+v, %v; want an unknown outcome whose reason keeps the end of the server's stderr without the value's last bytes", intent, rec, err)
	}
}
