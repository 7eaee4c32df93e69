package wrap

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeCallRefusesAmbiguousParams(t *testing.T) {
	for _, c := range []struct{ params, why string }{
		{`{"name":"charge","NAME":"get_balance"}`, "differ only in case"},
		{`{"arguments":{"amount":500},"Arguments":{"amount":1},"name":"charge"}`, "differ only in case"},
		{`{"name":"charge","arguments":{"amount":500},"arguments":{"amount":1}}`, "duplicate"},
		{`{"name":"charge","name":"get_balance"}`, "duplicate"},
		{`{"name":"charge","arguments":{"card":{"id":1,"id":2}}}`, "duplicate"},
		{`{"name":"charge","arguments":{"items":[{"Sku":1,"sku":2}]}}`, "differ only in case"},
		{`{"name":"charge","arguments":{"amount":500},"argument\u017f":{"amount":1}}`, "differ only in case"}, // ſ folds to s
		{`{"name":"charge","arguments":{"\u212aey":1,"key":2}}`, "differ only in case"},                       // Kelvin sign folds to k
		{`{"name":"charge","arguments":{"note":"\ud83d"}}`, "surrogate"},
		{"{\"name\":\"charge\",\"arguments\":{\"note\":\"\xff\"}}", "UTF-8"},
		{`{"name":"","arguments":{}}`, "non-empty string"},
		{`{"name":7}`, "non-empty string"},
		{`{"arguments":{}}`, "missing"},
		{`{"name":"charge","arguments":[1]}`, "must be an object"},
		{`[]`, "must be an object"},
	} {
		_, err := decodeCall(json.RawMessage(c.params))
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("decodeCall(%s) = %v, want an error about %q", c.params, err, c.why)
		}
	}
}

func TestDecodeCallKeepsBytes(t *testing.T) {
	for _, c := range []struct{ params, args, spliced string }{
		{`{"name":"charge","arguments": {"amount":1.50} ,"_meta":{"progressToken":1}}`, `{"amount":1.50}`,
			`{"name":"charge","arguments": {"k":"H","amount":1.50} ,"_meta":{"progressToken":1}}`},
		{`{"name":"charge"}`, `{}`, `{"arguments":{"k":"H"},"name":"charge"}`},
		{`{"name":"charge","arguments":null}`, `{}`, `{"name":"charge","arguments":{"k":"H"}}`},
	} {
		got, err := decodeCall(json.RawMessage(c.params))
		if err != nil {
			t.Fatalf("decodeCall(%s): %v", c.params, err)
		}
		if got.name != "charge" || string(got.args) != c.args {
			t.Errorf("decodeCall(%s) = %q %s", c.params, got.name, got.args)
		}
		a, _ := injectKey(got.args, "k", "H")
		if out := got.withArguments(a); string(out) != c.spliced || !json.Valid(out) {
			t.Errorf("withArguments on %s = %s, want %s", c.params, out, c.spliced)
		}
	}
}

// Under --key two calls share an intent; a member waiting on one must never receive the
// other's failure.
func TestFlightsSeparateCallsOfOneIntent(t *testing.T) {
	key := []Path{{"tag"}}
	a, _ := identify("S", "fail", []byte(`{"ms":1500,"tag":"k"}`), nil, key)
	b, _ := identify("S", "fail", []byte(`{"ms":1,"tag":"k"}`), nil, key)
	if a.intent != b.intent {
		t.Fatal("the test needs one intent")
	}
	var fs flights
	fs.m = map[string]*flight{}
	fa := fs.join(a.flightKey())
	fs.leave(a.intent, fa, true) // a holds and runs
	fb := fs.join(b.flightKey())
	if fb == fa {
		t.Fatal("a call with other arguments joined the attempt in flight")
	}
	fs.fail(a.intent, fa, answer{result: json.RawMessage(`"declined"`)})
	if got, failed := fs.leave(b.intent, fb, false); failed {
		t.Fatalf("b received a's failure %s", got.result)
	}
}
