package wrap

import (
	"bytes"
	"testing"

	"github.com/effectfence/effectfence/pkg/canon"
)

// FuzzDecodeCall: the request decoder and what reads the identity of an accepted call never
// panic, and agree with one another: the identity of the canonical arguments decodeCall cuts
// from the params is the one of the arguments as sent; an ignored field cut from the canonical
// arguments leaves them canonical; the arguments forwarded without the repeat argument, or
// with a key injected, are one JSON object.
func FuzzDecodeCall(f *testing.F) {
	for _, s := range []string{
		`{"name":"charge","arguments":{"amount":5,"meta":{"ts":1}}}`,
		`{"name":"charge","arguments":null,"_meta":{"progressToken":1}}`,
		`{"name":"c","arguments":{"effectfence_repeat":"2","k":{"a":[1,2]},"idempotency_key":""}}`,
		`{"name":"c","arguments":{"effectfence\u005frepeat" : 1 , "k":"\u00e9"}}`,
		`{"name":"c","arguments":{"meta":{"ts":1e400,"z":-0},"k":9007199254740993}}`,
		`{"name":"c","arguments":{"idempotency_key":null,"\ud83d\ude00":1,"\uffff":2}}`,
	} {
		f.Add([]byte(s))
	}
	ignore := []Path{{"meta", "ts"}, {"x"}}
	key := []Path{{"k"}, {"meta", "z"}}
	f.Fuzz(func(t *testing.T, params []byte) {
		c, err := decodeCall(params)
		if err != nil {
			return
		}
		for _, cfg := range []struct{ ignore, key []Path }{{nil, nil}, {ignore, nil}, {ignore, key}} {
			a, errA := identifyCanon("S", c.name, c.args, c.canonArgs, cfg.ignore, cfg.key)
			b, errB := identify("S", c.name, c.args, cfg.ignore, cfg.key)
			if (errA == nil) != (errB == nil) || errA == nil && (a.intent != b.intent || a.fp != b.fp || !bytes.Equal(a.args, b.args)) {
				t.Fatalf("identity from the cut canonical arguments %+v (%v) differs from the arguments' %+v (%v)", a, errA, b, errB)
			}
			if errA != nil {
				continue
			}
			if again, err := canon.JSON(a.args); err != nil || !bytes.Equal(again, a.args) {
				t.Fatalf("arguments with ignored fields cut are not canonical: %s (%v)", a.args, err)
			}
		}
		if out, ok := removeMember(c.args, RepeatArg); ok && !canon.Valid(out) {
			t.Fatalf("arguments without %s are not JSON: %s", RepeatArg, out)
		}
		if out, ok := injectKey(c.args, "idempotency_key", "h"); ok && !canon.Valid(out) {
			t.Fatalf("arguments with a key injected are not JSON: %s", out)
		}
		_ = fieldSpelledOtherwise(c.canonArgs, []string{"k.*", "*.ts", "meta"}, true, "redacted field")
	})
}
