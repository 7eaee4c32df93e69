package wrap

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

func TestIdentify(t *testing.T) {
	base, err := identify("S", "charge", []byte(`{"amount":5,"meta":{"ts":1,"who":"a"}}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base.intent, "wrap:charge:") || len(base.hash) != 64 || string(base.args) != `{"amount":5,"meta":{"ts":1,"who":"a"}}` {
		t.Fatalf("identity: %+v", base)
	}
	same, _ := identify("S", "charge", []byte(`{ "meta": {"who":"a","ts":1.0}, "amount": 5 }`), nil, nil)
	if same.intent != base.intent {
		t.Fatal("spelling changed identity")
	}
	other, _ := identify("S", "refund", []byte(`{"amount":5,"meta":{"ts":1,"who":"a"}}`), nil, nil)
	if other.intent == base.intent {
		t.Fatal("the tool name must be part of identity")
	}
	ts := []Path{{"meta", "ts"}, {"absent", "x"}}
	a, _ := identify("S", "charge", []byte(`{"amount":5,"meta":{"ts":1,"who":"a"}}`), ts, nil)
	b, _ := identify("S", "charge", []byte(`{"amount":5,"meta":{"ts":2,"who":"a"}}`), ts, nil)
	if a.intent != b.intent || string(a.args) != `{"amount":5,"meta":{"who":"a"}}` {
		t.Fatalf("ignored field still in identity: %s / %s", a.args, b.args)
	}
	key := []Path{{"order"}, {"missing"}}
	k1, _ := identify("S", "charge", []byte(`{"order":"o1","amount":5}`), nil, key)
	k2, _ := identify("S", "charge", []byte(`{"order":"o1","amount":6}`), nil, key)
	if k1.intent != k2.intent || string(k1.args) == string(k2.args) {
		t.Fatalf("--key: intents must match and fingerprints differ: %+v %+v", k1, k2)
	}
	// The intent of a keyed call is the one it always was (a ledger's records stay found)...
	if k1.intent != "wrap:charge:ec66fbdf6946291894c72d6f34887ebc29193c0628efbff2307205ae5cc91a59" {
		t.Fatalf("--key: the intent of a keyed call changed: %s", k1.intent)
	}
	// ...and effectfence_repeat names a deliberate repeat under --key too: a new value, a new
	// intent; the same value, the same intent.
	r2, _ := identify("S", "charge", []byte(`{"order":"o1","amount":5,"effectfence_repeat":"2"}`), nil, key)
	r2again, _ := identify("S", "charge", []byte(`{"effectfence_repeat":"2","amount":5,"order":"o1"}`), nil, key)
	r3, _ := identify("S", "charge", []byte(`{"order":"o1","amount":5,"effectfence_repeat":3}`), nil, key)
	if r2.intent == k1.intent || r2.intent != r2again.intent || r3.intent == r2.intent || r3.intent == k1.intent {
		t.Fatalf("--key with effectfence_repeat: %s, %s again, %s; without it %s", r2.intent, r2again.intent, r3.intent, k1.intent)
	}
	// Numbers keep their exact value: beyond 2^53 and beyond double range alike.
	n1, _ := identify("S", "charge", []byte(`{"amount":9007199254740993}`), nil, nil)
	n2, _ := identify("S", "charge", []byte(`{"amount":9007199254740992}`), nil, nil)
	h1, err := identify("S", "charge", []byte(`{"amount":1e999}`), nil, nil)
	h2, _ := identify("S", "charge", []byte(`{"amount":1e998}`), nil, nil)
	if err != nil || n1.intent == n2.intent || h1.intent == h2.intent || n1.fp == n2.fp {
		t.Fatalf("distinct numbers share an identity: %v", err)
	}
	// Strings are compared by code point after unescaping, never normalised: "\u00e9" is "é",
	// but "é" decomposed (e and a combining acute, what NFD gives) is another value and another
	// call (docs/identity.md).
	esc, _ := identify("S", "charge", []byte(`{"name":"Jos\u00e9"}`), nil, nil)
	nfc, _ := identify("S", "charge", []byte("{\"name\":\"Jos\u00e9\"}"), nil, nil)
	nfd, _ := identify("S", "charge", []byte("{\"name\":\"Jose\u0301\"}"), nil, nil)
	if esc.intent != nfc.intent || nfc.intent == nfd.intent || nfc.fp == nfd.fp {
		t.Fatalf("unicode: escaped %s, NFC %s, NFD %s", esc.intent, nfc.intent, nfd.intent)
	}
	// The scope is part of the identity; the engine's fingerprint (tool and args) is not scoped.
	s2, _ := identify("other", "charge", []byte(`{"amount":5,"meta":{"ts":1,"who":"a"}}`), nil, nil)
	if s2.intent == base.intent || s2.fp != base.fp {
		t.Fatalf("scope: %+v vs %+v", s2, base)
	}
}

func TestKeyInjection(t *testing.T) {
	for _, c := range []struct {
		name string
		like bool
	}{{"idempotency_key", true}, {"idempotencyKey", true}, {"Idempotency-Key", true}, {"request_id", true}, {"clientToken", true}, {"key", false}, {"request", false}} {
		if keyLike(c.name) != c.like {
			t.Errorf("keyLike(%q) = %v", c.name, !c.like)
		}
	}
	for _, c := range []struct{ args, want string }{
		{`{"a":1}`, `{"k":"H","a":1}`},
		{` { "b" : 1.50 , "a":[2] } `, ` {"k":"H", "b" : 1.50 , "a":[2] } `},
		{`{}`, `{"k":"H"}`},
		{`{"a":1.0,"k":"" }`, `{"a":1.0,"k":"H" }`},
		{`{"k": null,"z":1e2}`, `{"k": "H","z":1e2}`},
		{`{"k":"mine"}`, `{"k":"mine"}`},
	} {
		got, _ := injectKey([]byte(c.args), "k", "H")
		if string(got) != c.want {
			t.Errorf("injectKey(%s) = %s, want %s", c.args, got, c.want)
		}
	}
	info, _, err := parseTools([]byte(`{"tools":[{"name":"a","inputSchema":{"properties":{"request_id":{"type":"integer"},"idempotency_key":{"type":["string","null"]}}}},{"name":"b","inputSchema":{}, "annotations":{"readOnlyHint":true}}]}`))
	if err != nil || info["a"].keyProp != "idempotency_key" || !info["b"].readOnly || info["b"].keyProp != "" {
		t.Fatalf("parseTools: %+v %v", info, err)
	}
	// The key is the hash where the schema admits a string of 64 hex digits, else its first
	// digits where it asks for a shorter one (of at least 32), or a UUID made of them; nowhere
	// else.
	const hash = "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9f"
	for schema, want := range map[string]struct{ prop, key string }{
		`{"idempotency_key":{"type":"string","maxLength":64,"minLength":64}}`: {"idempotency_key", hash},
		`{"idempotency_key":{"type":"string","maxLength":45}}`:                {"idempotency_key", hash[:45]},
		`{"idempotency_key":{"type":"string","maxLength":20}}`:                {"", ""},
		// A property named twice is read as JSON.parse reads it, as the server does: the last.
		`{"idempotency_key":{"type":"integer"},"idempotency_key":{"type":"string"}}`:                                                                                   {"idempotency_key", hash},
		`{"idempotency_key":{"type":"string"},"idempotency_key":{"type":"integer"}}`:                                                                                   {"", ""},
		`{"idempotency_key":{"type":"string","minLength":65}}`:                                                                                                         {"", ""},
		`{"idempotency_key":{"type":"string","format":"uuid"}}`:                                                                                                        {"idempotency_key", "a1b2c3d4-e5f6-8718-a93a-4b5c6d7e8f90"},
		`{"idempotency_key":{"type":"string","format":"email"}}`:                                                                                                       {"", ""},
		`{"idempotency_key":{"type":"string","pattern":"^[0-9]+$"}}`:                                                                                                   {"", ""},
		`{"idempotency_key":{"type":"string","pattern":"^[0-9a-f]{40,50}$"}}`:                                                                                          {"", ""},
		`{"idempotency_key":{"type":"string","pattern":"^[0-9a-f]{40,50}$","maxLength":48}}`:                                                                           {"idempotency_key", hash[:48]},
		`{"idempotency_key":{"type":"string","pattern":"(?<=a)b"}}`:                                                                                                    {"", ""},
		`{"idempotency_key":{"type":"string","format":"uuid","pattern":"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$"}}`: {"idempotency_key", "a1b2c3d4-e5f6-8718-a93a-4b5c6d7e8f90"},
		`{"idempotency_key":{"enum":["a","b"]}}`:                                                                                                                       {"", ""},
		`{"idempotency_key":{"const":"a"}}`:                                                                                                                            {"", ""},
		`{"idempotency_key":{"type":"string","pattern":"x"},"request_id":{"type":"string"}}`:                                                                           {"request_id", hash},
		`{"idempotency_key":{"type":"string","format":"uuid"},"request_id":{"type":"string"}}`:                                                                         {"idempotency_key", "a1b2c3d4-e5f6-8718-a93a-4b5c6d7e8f90"},
		// Python's str | None, with and without a max_length (pydantic's schemas).
		`{"idempotency_key":{"anyOf":[{"type":"string"},{"type":"null"}],"default":null}}`:                {"idempotency_key", hash},
		`{"idempotency_key":{"anyOf":[{"maxLength":45,"type":"string"},{"type":"null"}],"default":null}}`: {"idempotency_key", hash[:45]},
		`{"idempotency_key":{"anyOf":[{"maxLength":8,"type":"string"},{"type":"null"}],"default":null}}`:  {"", ""},
		`{"idempotency_key":{"oneOf":[{"type":"integer"},{"type":"null"}]}}`:                              {"", ""},
		`{"idempotency_key":{"allOf":[{"type":"string"},{"maxLength":36}]}}`:                              {"idempotency_key", hash[:36]},
	} {
		info, _, err := parseTools([]byte(`{"tools":[{"name":"a","inputSchema":{"properties":` + schema + `}}]}`))
		if err != nil || info["a"].keyProp != want.prop {
			t.Errorf("parseTools of properties %s: key property %q (%v), want %q", schema, info["a"].keyProp, err, want.prop)
			continue
		}
		if got := info["a"].keyForm.key(hash); want.prop != "" && got != want.key {
			t.Errorf("parseTools of properties %s: key %q, want %q", schema, got, want.key)
		}
	}
	// The UUID's version (8) and variant digits are the ones every UUID check accepts, for any
	// hash (zod's check, as the TypeScript SDK's servers run it).
	zod := regexp.MustCompile(`^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000)$`)
	for i := range 16 {
		h := strings.Repeat(fmt.Sprintf("%x", i), 64)
		if u := uuidKey.key(h); !zod.MatchString(u) || !isUUID(u) {
			t.Errorf("uuidKey.key(%s) = %s, not a UUID", h[:8], u)
		}
	}
}

// docs/identity.md: wrap removes effectfence_repeat from the arguments before the server sees
// them "unless the tool's own input schema declares a property of that name": then it is the
// tool's own argument, and removing it would lose what the agent sent.
func TestRepeatArgumentDeclaredBySchema(t *testing.T) {
	info, _, err := parseTools([]byte(`{"tools":[` +
		`{"name":"own","inputSchema":{"type":"object","properties":{"effectfence_repeat":{"type":"integer"},"n":{}}}},` +
		`{"name":"plain","inputSchema":{"type":"object","properties":{"n":{}}}},` +
		`{"name":"bare","inputSchema":{}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"own": true, "plain": false, "bare": false} {
		if got := info[name].repeatProp; got != want {
			t.Errorf("%s: repeatProp %v, want %v", name, got, want)
		}
	}
}
