package wrap

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unicode"
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
		{`{"name":"charge","Arguments":{"amount":500}}`, "but for case"},                                      // mcp-go reads it as arguments
		{`{"name":"charge","\u0041rguments":{"amount":500}}`, "but for case"},                                 // escaped, the same name
		{`{"name":"charge","argument\u017f":{"amount":500}}`, "but for case"},                                 // ſ folds to s
		{`{"name":"charge","arguments":{},"TASK":{"ttl":1000}}`, "but for case"},                              // a task to a Go server
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
	fs.m = map[flightKey]*flight{}
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

// foldKey's ASCII shortcuts agree with the definition (the smallest rune of the orbit).
func TestFoldKeyIsTheSmallestOfTheOrbit(t *testing.T) {
	for r := rune(0); r < 0x10000; r++ {
		if r >= 0xD800 && r < 0xE000 {
			continue
		}
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
		}
		if got := foldKey(string(r)); got != string(m) {
			t.Fatalf("foldKey(%q) = %q, want %q", r, got, m)
		}
	}
	if !sameFold([]byte(`"Sku"`), []byte(`"sKU"`)) || sameFold([]byte(`"sku"`), []byte(`"skus"`)) || !sameFold([]byte(`"\u212aey"`), []byte(`"key"`)) || !sameFold([]byte("\"\u212aey\""), []byte(`"KEY"`)) {
		t.Fatal("sameFold is wrong")
	}
}

// Objects of more than 16 members switch to a map: collisions are still found, in order.
func TestCaseCollisionsInLargeObjects(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"name":"x","arguments":{`)
	for i := range 40 {
		fmt.Fprintf(&b, `"k%d":[{"a":1,"b":{"c":"}\"]"}}],`, i)
	}
	b.WriteString(`"K7":1}}`)
	_, err := decodeCall(json.RawMessage(b.String()))
	if err == nil || !strings.Contains(err.Error(), `"k7" and "K7"`) {
		t.Fatalf("got %v", err)
	}
	ok := strings.Replace(b.String(), `"K7"`, `"K70"`, 1)
	if c, err := decodeCall(json.RawMessage(ok)); err != nil || c.name != "x" {
		t.Fatalf("got %v", err)
	}
}

// The scanner reads members the way encoding/json does: escaped names, spaces everywhere,
// nested strings holding brackets, and values of every kind before the ones it needs.
func TestDecodeCallReadsLikeEncodingJSON(t *testing.T) {
	for _, params := range []string{
		`{ "na\u006de" : "ch\"arge" , "arguments" :  { "a" : "]}" , "b" : [ 1 , { } ] }  }`,
		"{\"_meta\":{\"x\":[true,false,null,-1.5e3]},\r\n\t\"task\":{\"ttl\":1},\"name\":\"t\\u00e9\",\"arguments\":null}",
		`{"x":"\\","arguments":{"\\\"":1},"name":"n"}`,
		`{"task":null,"name":"n"}`,
	} {
		c, err := decodeCall(json.RawMessage(params))
		if err != nil {
			t.Fatalf("decodeCall(%s): %v", params, err)
		}
		var want struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			Task      json.RawMessage `json:"task"`
		}
		if err := json.Unmarshal([]byte(params), &want); err != nil {
			t.Fatal(err)
		}
		args := want.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		task := want.Task != nil && string(want.Task) != "null"
		if c.name != want.Name || string(c.args) != string(args) || c.task != task {
			t.Errorf("decodeCall(%s) = %q %s %v, want %q %s %v", params, c.name, c.args, c.task, want.Name, args, task)
		}
		if c.argsEnd > 0 && string(c.params[c.argsStart:c.argsEnd]) != string(want.Arguments) {
			t.Errorf("decodeCall(%s): arguments at [%d:%d] are %s", params, c.argsStart, c.argsEnd, c.params[c.argsStart:c.argsEnd])
		}
	}
}

// decodeCall hands identify the canonical arguments it cut from the canonical params; the
// identity must be the one identify computes from the arguments alone.
func TestDecodeCallCanonicalArgumentsAreTheArgumentsCanonicalForm(t *testing.T) {
	for _, params := range []string{
		`{"name":"t","arguments":{"b":[1.0,2e0,{"z":"\u0041","a":null}],"a":"\u00e9"}}`,
		`{ "arguments" : { "x" : 1 } , "name" : "t", "_meta": {"progressToken": 3} }`,
		`{"name":"t","argum\u0065nts":{"k":"v"}}`,
		`{"name":"t"}`,
		`{"name":"t","arguments":null}`,
		`{"name":"t","arguments":{}}`,
		`{"name":"t","arguments":{"n":9007199254740993,"s":"\ud83d\ude00","e":"\u2028"}}`,
	} {
		c, err := decodeCall(json.RawMessage(params))
		if err != nil {
			t.Fatalf("%s: %v", params, err)
		}
		want, err := identify("S", c.name, c.args, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := identifyCanon("S", c.name, c.args, c.canonArgs, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.canonArgs == nil || string(got.args) != string(want.args) || got.intent != want.intent || got.fp != want.fp {
			t.Errorf("%s: canonical arguments %s, want %s", params, got.args, want.args)
		}
	}
}

// TestCaseCollisionsFoldEachNameOnce: an object's first 16 names are compared pair by pair,
// but each is unquoted and folded once, not once per comparison: 15 long non-ASCII names
// cost about twice their size in allocation, not 28 times (16 names of 500 KB of "é" took
// 1.7 s for an 8 MB request). Bytes allocated are counted, not time.
func TestCaseCollisionsFoldEachNameOnce(t *testing.T) {
	for _, name := range []string{"é", `\u00e9`, "ǅ"} {
		var b strings.Builder
		b.WriteString(`{"name":"t","arguments":{`)
		for i := range 15 {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"%s%02d":%d`, strings.Repeat(name, 64<<10), i, i)
		}
		b.WriteString(`}}`)
		in := []byte(b.String())
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := caseCollisions(in); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(4*len(in)) {
			t.Errorf("names of %q: %d bytes allocated to check %d bytes for case collisions", name, alloc, len(in))
		}
	}
}
