package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
)

// docs/privacy.md: a redacted value is kept off the disk, and its fingerprint (an unsalted
// SHA-256 of the call) lets whoever holds it test guesses of that value offline (a card number
// is about 10^9 candidates; 12 hex digits of the fingerprint tell them apart too). Neither
// fence_status without proof nor the intent_conflict refusal of another call may hand it to
// any process that names the intent: with the real binary, one serve process prepares a charge
// with its card redacted; another, on the same ledger file, asks fence_status for the intent
// without proof and prepares the intent with other args. Neither answer may hold any 12 hex
// digits of the fingerprint, which a guess of the card number reproduces. With proof (the
// same call) it is shown.
func TestServeStatusWithoutProofHidesTheFingerprint(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "ledger.db")
	const card = "4111111111111111"
	args := `{"amount":4900,"card":"` + card + `"}`
	a := startServe(t, "--ledger", path)
	if p := a.prepare(`{"intent":"charge:o-77","tool":"charge_card","args":` + args + `,"redact":["card"]}`); p.Status != serve.StatusFresh {
		t.Fatalf("prepare: %+v", p)
	}
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	defer eng.Close()
	guess, err := eng.Fingerprint("charge_card", []byte(`{"card":"`+card+`","amount":4900}`))
	if err != nil {
		t.Fatal(err)
	}
	b := startServe(t, "--ledger", path)
	noProof, isErr := b.call(serve.ToolStatus, `{"intent":"charge:o-77"}`)
	if isErr || !strings.Contains(string(noProof), `"withheld"`) || !strings.Contains(string(noProof), `"in_flight"`) {
		t.Fatalf("fence_status without proof: %s", noProof)
	}
	conflict, isErr := b.call(serve.ToolPrepare, `{"intent":"charge:o-77","tool":"charge_card","args":{"amount":1}}`)
	if !isErr || !strings.Contains(string(conflict), `"code":"intent_conflict"`) {
		t.Fatalf("prepare with other args: %s", conflict)
	}
	for what, text := range map[string]string{"fence_status without proof": string(noProof), "the intent_conflict refusal": string(conflict)} {
		for i := 0; i+12 <= len(guess); i++ {
			if strings.Contains(text, guess[i:i+12]) {
				t.Fatalf("%s shows the fingerprint %s (from its digit %d), which a guess of the redacted card number reproduces: %s", what, guess, i, text)
			}
		}
	}
	proof, isErr := b.call(serve.ToolStatus, `{"intent":"charge:o-77","tool":"charge_card","args":`+args+`}`)
	if isErr || !strings.Contains(string(proof), `"tool":"charge_card"`) || !strings.Contains(string(proof), guess) {
		t.Fatalf("fence_status with proof does not show the call and its fingerprint %s: %s", guess, proof)
	}
}
