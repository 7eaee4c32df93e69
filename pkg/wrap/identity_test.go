package wrap

import (
	"strings"
	"testing"
)

func TestIdentify(t *testing.T) {
	base, err := identify("charge", []byte(`{"amount":5,"meta":{"ts":1,"who":"a"}}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(base.intent, "wrap:charge:") || len(base.hash) != 64 || string(base.args) != `{"amount":5,"meta":{"ts":1,"who":"a"}}` {
		t.Fatalf("identity: %+v", base)
	}
	same, _ := identify("charge", []byte(`{ "meta": {"who":"a","ts":1.0}, "amount": 5 }`), nil, nil)
	if same.intent != base.intent {
		t.Fatal("spelling changed identity")
	}
	other, _ := identify("refund", []byte(`{"amount":5,"meta":{"ts":1,"who":"a"}}`), nil, nil)
	if other.intent == base.intent {
		t.Fatal("the tool name must be part of identity")
	}
	ts := []Path{{"meta", "ts"}, {"absent", "x"}}
	a, _ := identify("charge", []byte(`{"amount":5,"meta":{"ts":1,"who":"a"}}`), ts, nil)
	b, _ := identify("charge", []byte(`{"amount":5,"meta":{"ts":2,"who":"a"}}`), ts, nil)
	if a.intent != b.intent || string(a.args) != `{"amount":5,"meta":{"who":"a"}}` {
		t.Fatalf("ignored field still in identity: %s / %s", a.args, b.args)
	}
	key := []Path{{"order"}, {"missing"}}
	k1, _ := identify("charge", []byte(`{"order":"o1","amount":5}`), nil, key)
	k2, _ := identify("charge", []byte(`{"order":"o1","amount":6}`), nil, key)
	if k1.intent != k2.intent || string(k1.args) == string(k2.args) {
		t.Fatalf("--key: intents must match and fingerprints differ: %+v %+v", k1, k2)
	}
	if _, err := identify("charge", []byte(`{"amount":1e999}`), nil, nil); err == nil {
		t.Fatal("a number JCS cannot represent must be refused")
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
		{`{"a":1}`, `{"a":1,"k":"H"}`},
		{`{"k":""}`, `{"k":"H"}`},
		{`{"k":null}`, `{"k":"H"}`},
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
}
