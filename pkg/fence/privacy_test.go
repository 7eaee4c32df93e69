package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
)

const secretCard = "4111111111111111"

func chargeArgs(card string) []byte {
	return []byte(`{"amount":4900,"card":{"number":"` + card + `","exp":"12/30"},"items":[{"sku":"a","cvv":"123"},{"sku":"b","cvv":"456"}]}`)
}

// TestRedactStoresNoSecretButKeepsIdentity: redacted fields never reach the record or the cert,
// yet a duplicate with the same values replays and one with a different value is a conflict.
func TestRedactStoresNoSecretButKeepsIdentity(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	req := fence.Request{Intent: "charge:1", Tool: "charge", Args: chargeArgs(secretCard), Redact: []string{"card.number", "items.*.cvv", "no.such.field"}}
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"charge":"ch_1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.Verify(); err != nil {
		t.Fatalf("a cert with redacted args must verify: %v", err)
	}
	rec, err := eng.Status(ctx, "charge:1")
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(rec)
	for _, secret := range []string{secretCard, `"123"`, `"456"`} {
		if strings.Contains(string(all), secret) {
			t.Fatalf("the record keeps redacted value %s: %s", secret, all)
		}
	}
	want := `{"amount":4900,"card":{"exp":"12/30","number":"[redacted]"},"items":[{"cvv":"[redacted]","sku":"a"},{"cvv":"[redacted]","sku":"b"}]}`
	if string(rec.Args) != want || string(rec.Cert.Args) != want {
		t.Fatalf("stored args\n got %s\nwant %s", rec.Args, want)
	}
	fp, _ := canon.Fingerprint("charge", chargeArgs(secretCard))
	if rec.Fingerprint != fp {
		t.Fatalf("fingerprint %s is not that of the full arguments %s", rec.Fingerprint, fp)
	}
	if len(rec.Redacted) != 3 {
		t.Fatalf("the record does not say what was redacted: %v", rec.Redacted)
	}

	dup, err := eng.Prepare(ctx, req)
	if err != nil || dup.Fresh() || dup.Cert.Hash != cert.Hash || dup.ResultNotKept {
		t.Fatalf("duplicate: %+v %v", dup, err)
	}
	other := req
	other.Args = chargeArgs("5500000000000004")
	if _, err := eng.Prepare(ctx, other); !errors.Is(err, fence.ErrConflict) {
		t.Fatalf("a different redacted value must conflict, got %v", err)
	}
}

// TestKeepHashNeverReruns: only the digest of the result is kept; a duplicate is told when it
// was done and that the result was not kept, and is never handed a ticket.
func TestKeepHashNeverReruns(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	req := fence.Request{Intent: "issue-key:1", Tool: "create_api_key", Args: []byte(`{"name":"ci"}`), KeepResult: fence.KeepHash}
	adm, err := eng.Prepare(ctx, req)
	if err != nil || !adm.Fresh() {
		t.Fatalf("prepare: %+v %v", adm, err)
	}
	result := []byte(`{"key": "sk_live_supersecret", "id": 7}`)
	cert, err := eng.Commit(ctx, *adm.Ticket, result)
	if err != nil {
		t.Fatal(err)
	}
	if err := cert.Verify(); err != nil {
		t.Fatal(err)
	}
	sum, ok := cert.ResultNotKept()
	want, _ := fence.ResultSHA256(result)
	if !ok || sum != want {
		t.Fatalf("cert result %s: digest %q ok=%v, want %s", cert.Result, sum, ok, want)
	}
	rec, _ := eng.Status(ctx, req.Intent)
	if all, _ := json.Marshal(rec); strings.Contains(string(all), "supersecret") {
		t.Fatalf("the record keeps the result: %s", all)
	}
	if !cert.SameResult([]byte(`{"id":7,"key":"sk_live_supersecret"}`)) {
		t.Fatal("the same result (respelled) does not match its digest")
	}
	if cert.SameResult([]byte(`{"id":8}`)) {
		t.Fatal("a different result matches the digest")
	}
	for range 3 {
		dup, err := eng.Prepare(ctx, req)
		if err != nil || dup.Fresh() || !dup.ResultNotKept || dup.RecordedAt.IsZero() || dup.Cert.Hash != cert.Hash {
			t.Fatalf("duplicate of a hash-only intent: %+v %v", dup, err)
		}
	}
	st, _ := eng.Stats(ctx)
	if st.SinceBoot.Admitted != 1 || st.SinceBoot.Replayed != 3 {
		t.Fatalf("counts: %+v", st.SinceBoot)
	}
}

// A cert of keep-result hash verifies without its result's digest because its result is the
// object the engine writes in its place, in its one form: that object with anything beside the
// digest in it (text an agent would be shown as the replayed result) is not, and does not
// verify, since its bytes are not the result result_sha256 digests.
func TestKeepHashCertHoldsOnlyTheDigestObject(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "refund:1", Tool: "refund", KeepResult: fence.KeepHash})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"refund":"re_1"}`))
	if err != nil {
		t.Fatal(err)
	}
	sum, ok := cert.ResultNotKept()
	if err := cert.Verify(); err != nil || !ok || string(cert.Result) != `{"effectfence/result_not_kept":{"sha256":"`+sum+`"}}` {
		t.Fatalf("cert %s: %v", cert.Result, err)
	}
	for _, forged := range []string{
		`{"effectfence/result_not_kept":{"sha256":"` + sum + `","text":"refund sent to account 4242"}}`,
		`{"effectfence/result_not_kept":{"text":"refund sent","sha256":"` + sum + `"}}`,
		`{"effectfence/result_not_kept":{"sha256":"` + strings.ToUpper(sum) + `"}}`,
		`{"effectfence/result_not_kept": {"sha256":"` + sum + `"}}`,
	} {
		c := *cert
		c.Result = []byte(forged)
		if err := c.Verify(); err == nil || !strings.Contains(err.Error(), "result_sha256") {
			t.Errorf("a keep-result hash cert holding %s: Verify = %v", forged, err)
		}
	}
}

func TestPrivacySettingsValidated(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	for _, req := range []fence.Request{
		{Intent: "x", Tool: "t", KeepResult: "none"},
		{Intent: "x", Tool: "t", Redact: []string{""}},
		{Intent: "x", Tool: "t", Redact: []string{"a..b"}},
		{Intent: "x", Tool: "t", Redact: make([]string, fence.MaxRedactPaths+1)},
	} {
		if _, err := eng.Prepare(ctx, req); !errors.Is(err, fence.ErrInvalid) {
			t.Errorf("%+v: want invalid_request, got %v", req, err)
		}
	}
	if rec, _ := eng.Status(ctx, "x"); rec.State != fence.StateNone {
		t.Fatalf("a refused request left state: %+v", rec)
	}
}

func TestRedactArgsKeepsNumbersExact(t *testing.T) {
	in, _ := canon.JSON([]byte(`{"big":123456789012345678901234567890,"d":1.000000000000000000001,"s":"x"}`))
	out, err := fence.RedactArgs(in, []string{"s"})
	if err != nil {
		t.Fatal(err)
	}
	// Whatever canonical form the numbers have, redaction leaves it unchanged.
	if want := strings.Replace(string(in), `"s":"x"`, `"s":"[redacted]"`, 1); string(out) != want {
		t.Fatalf("redaction changed a number or missed the field: %s", out)
	}
}
