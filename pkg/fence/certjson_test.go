package fence_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/doctest"
	"github.com/effectfence/effectfence/pkg/fence"
)

// A cert's JSON edited around its hash is refused by fence.Cert as by docs/CERTS.md's recipe:
// a member shown with one value while a member of the same name in another case (which
// encoding/json took for it: "INTENT" for intent) or a second member of the name carries the
// hashed one, in the cert or in its vector clock or read set; a member the hash does not
// cover; a readable result that is not result_bytes' value. Each leaves the hash as it was (an unkeyed hash proves nothing against an editor who
// computes it again: docs/CERTS.md, "What a verified cert proves").
// Before, each decoded and verified: a cert whose intent read "charge:B" and tool "refund"
// verified as the cert of "charge:A" and "charge", and one whose readable result was edited
// verified too, which the recipe's step 2a refuses.
func TestCertJSONEditedAroundItsHashDoesNotVerify(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "charge:A", Tool: "charge", Args: json.RawMessage(`{"amount":1}`), Agent: "a",
		ReadSet: []fence.ReadSetEntry{{Domain: "order:1", Seq: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	// Spaces in the result: a readable result and result_bytes both.
	c, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	edit := func(old, new string) string {
		if !strings.Contains(doc, old) {
			t.Fatalf("%s is not in the cert %s", old, doc)
		}
		return strings.Replace(doc, old, new, 1)
	}
	old := `"result":{"ok":1}` // MarshalJSON compacts the readable result
	exact := base64.StdEncoding.EncodeToString([]byte(`{"ok": 1}`))
	edited := map[string]string{
		"intent shown edited, the hashed one in another case after it": edit(`"intent":"charge:A"`, `"intent":"charge:B","INTENT":"charge:A"`),
		"tool shown edited, the hashed one in another case after it":   edit(`"tool":"charge"`, `"tool":"refund","Tool":"charge"`),
		"intent given twice":                 edit(`"intent":"charge:A"`, `"intent":"charge:B","intent":"charge:A"`),
		"a member the hash does not cover":   edit(`"intent":"charge:A"`, `"intent":"charge:A","refunded":100`),
		"a clock's counter given twice":      edit(`"vector_clock":{"a":1}`, `"vector_clock":{"a":7,"a":1}`),
		"a read set entry's seq given twice": edit(`"seq":0}]`, `"seq":5,"seq":0}]`),
		"a read set entry's seq shown edited, the hashed one in another case after it": edit(`"seq":0}]`, `"seq":7,"SEQ":0}]`),
		"a read set entry's seq renamed":                                               edit(`"seq":0}]`, `"sequence":0}]`),
		"readable result edited":                                                       edit(old, `"result":{"ok":999}`),
		"readable result respelled, another":                                           edit(old, `"result":{ "ok" : 1.5 }`),
	}
	for what, e := range edited {
		var d fence.Cert
		if err := json.Unmarshal([]byte(e), &d); err == nil {
			if verr := d.Verify(); verr == nil {
				t.Errorf("%s: decoded and verified (intent %q, tool %q, result %s):\n%s", what, d.Intent, d.Tool, d.Result, e)
			}
		}
	}
	// What effectfence writes still decodes and verifies, with its readable result respelled
	// (a store may re-space or re-escape it) or null (no readable result).
	for what, e := range map[string]string{
		"as written":         doc,
		"readable respelled": edit(old, `"result":{ "\u006fk" : 1.0 }`),
		"readable null":      edit(old, `"result":null`),
	} {
		var d fence.Cert
		if err := json.Unmarshal([]byte(e), &d); err != nil {
			t.Errorf("%s: %v", what, err)
		} else if err := d.Verify(); err != nil || string(d.Result) != `{"ok": 1}` {
			t.Errorf("%s: verify %v, result %s", what, err, d.Result)
		}
	}
	// A result no canonicaliser takes (a member given twice), with what json.Marshal escapes:
	// its readable copy, HTML-escaped, is still its value.
	adm, err = eng.Prepare(ctx, fence.Request{Intent: "charge:twice", Tool: "charge", Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	twice := `{"k": "<a&b>", "k": 2}`
	ct, err := eng.Commit(ctx, *adm.Ticket, []byte(twice))
	if err != nil {
		t.Fatal(err)
	}
	escaped, err := json.Marshal(ct)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(escaped), `\u003c`) {
		t.Fatalf("json.Marshal did not escape the readable result: %s", escaped)
	}
	// A lone surrogate escape, which encoding/json reads as U+FFFD whichever it is: edited in
	// the readable copy, the cert does not verify.
	adm, err = eng.Prepare(ctx, fence.Request{Intent: "charge:cut", Tool: "charge", Agent: "a"})
	if err != nil {
		t.Fatal(err)
	}
	cut, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"k":1,"k":2,"s":"cut \ud83d"}`))
	if err != nil {
		t.Fatal(err)
	}
	cutJSON, err := json.Marshal(cut)
	if err != nil {
		t.Fatal(err)
	}
	var cutBack fence.Cert
	if err := json.Unmarshal(cutJSON, &cutBack); err != nil || cutBack.Verify() != nil {
		t.Errorf("a result with a lone surrogate: %v, verify %v", err, cutBack.Verify())
	}
	if e := bytes.Replace(cutJSON, []byte(`\ud83d`), []byte(`\ud830`), 1); json.Unmarshal(e, &cutBack) == nil && cutBack.Verify() == nil {
		t.Errorf("a readable result whose lone surrogate was edited verified:\n%s", e)
	}
	for what, e := range map[string][]byte{
		"HTML-escaped":       escaped,
		"a number respelled": bytes.Replace(escaped, []byte(`"k":2`), []byte(`"k":2.0`), 1),
	} {
		var back fence.Cert
		if err := json.Unmarshal(e, &back); err != nil || back.Verify() != nil || string(back.Result) != twice {
			t.Errorf("a result with a member twice, its readable copy %s: %v, verify %v, result %s", what, err, back.Verify(), back.Result)
		}
	}
	if !strings.Contains(doc, exact) {
		t.Fatalf("result_bytes %s not in %s", exact, doc)
	}

	// The recipe refuses every edited one and takes the others.
	py, err := exec.LookPath("python3")
	if err != nil {
		return
	}
	script := doctest.CertsVerifier(t, "../../docs/CERTS.md")
	for what, e := range edited {
		cmd := exec.Command(py, "-c", script)
		cmd.Stdin = strings.NewReader(e)
		out, _ := cmd.CombinedOutput()
		if strings.TrimSpace(string(out)) == "ok" {
			t.Errorf("%s: the documented verifier printed ok", what)
		}
	}
}
