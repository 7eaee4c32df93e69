package wrap_test

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestRedactionDoesNotReachIntoAResult: docs/privacy.md, redaction covers the arguments, not a
// successful result, which the ledger keeps as the tool returned it, to replay it: a tool that
// repeats a redacted value in its result puts the value in the ledger that way. With
// --keep-result TOOL=hash beside --redact, neither reaches the ledger's files.
func TestRedactionDoesNotReachIntoAResult(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		flags   []string
		inClear bool
	}{
		"redact only":            {[]string{"--redact", "echo:text"}, true},
		"redact and result hash": {[]string{"--redact", "echo:text", "--keep-result", "echo=hash"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			const secret = "4111999988887777"
			w := r.wrap(c.flags...)
			res := call(t, w.Session, "echo", `{"text":"`+secret+`"}`)
			if res.IsError || !strings.Contains(res.text(), secret) {
				t.Fatalf("echo: %+v", res)
			}
			w.Close()
			recs := r.records(t)["echo"]
			if len(recs) != 1 {
				t.Fatalf("records of echo: %+v; want one", recs)
			}
			rec := recs[0]
			if rec.State != fence.StateDone || strings.Contains(string(rec.Args), secret) || !strings.Contains(string(rec.Args), fence.Redacted) {
				t.Fatalf("record: %+v; want done with the argument redacted", rec)
			}
			if c.inClear {
				if !strings.Contains(string(rec.Cert.Result), secret) {
					t.Fatalf("the recorded result %s does not repeat the value: the doc's warning is out of date", rec.Cert.Result)
				}
				return
			}
			ledgerFilesLack(t, r, secret)
		})
	}
}
