package fence

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Values the record encoder must write exactly as encoding/json does.
var (
	encStrings = []string{"", "a", "charge:order-123", `q"uote`, `back\slash`, "tab\tnl\ncr\rbs\bff\f", "\x00\x01\x1f\x7f",
		"<script>&amp;", "héllo wörld", "日本語", "\u2028\u2029", "bad\xffutf8\xc3", "\xed\xa0\x80surrogate", "\uFFFD", "emoji 🎉"}
	encRaws = []string{"", "null", "{}", "[]", `{"a":1}`, `{"a": 1}`, ` {"a":1}`, "{\"a\":1}\n", `{"q":"a<b&c \u2028"}`,
		`{"s":"with spaces inside"}`, `[1,2.5,-3e10,true,false,null,"x"]`, `{"a":{"b":[{"c":"d"}]}}`, `{"a":}`, `"unterminated`,
		`{"esc":"\"\\\/\b\f\n\r\t\u00e9"}`, "{\"raw\":\"\xff\"}", `01`, `1.`, `{"a":1}{"b":2}`, "\"tab\tinside\"", `{"a" :1}`}
	encTimes = func() []time.Time {
		now := time.Now()
		return []time.Time{{}, now, now.UTC(), now.Round(0), now.In(time.FixedZone("", 5*3600+30*60)),
			now.In(time.FixedZone("odd", -(3*3600 + 17))), now.In(time.FixedZone("far", 25*3600)),
			now.In(time.FixedZone("edge", 24*3600-1)), now.In(time.FixedZone("minus", -24*3600)), now.In(time.FixedZone("huge", 100*3600+60)), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
			time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
			time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, 1).UTC(), time.Unix(1700000000, 120000000)}
	}()
)

// fillRandom sets every field of the struct v points to from the value lists above, by type. A
// field of a type it does not know fails the test: appendRecord must learn that field too.
func fillRandom(t testing.TB, r *rand.Rand, v reflect.Value, depth int) {
	v = v.Elem()
	for i := 0; i < v.NumField(); i++ {
		f, name := v.Field(i), v.Type().Field(i).Name
		switch f.Interface().(type) {
		case string, State, KeepResult:
			f.SetString(encStrings[r.IntN(len(encStrings))])
		case uint64:
			f.SetUint([]uint64{0, 1, 42, math.MaxUint64, r.Uint64()}[r.IntN(5)])
		case bool:
			f.SetBool(r.IntN(2) == 0)
		case json.RawMessage:
			if k := r.IntN(len(encRaws) + 1); k < len(encRaws) {
				f.SetBytes([]byte(encRaws[k]))
			} else {
				f.SetBytes(nil)
			}
		case []byte:
			f.SetBytes([][]byte{nil, {}, {0, 1, 2, 255}, []byte(`{"a":1}`)}[r.IntN(4)])
		case []string:
			f.Set(reflect.ValueOf([][]string{nil, {}, {"$.a"}, {"$.a", `$["q\"x"]`}}[r.IntN(4)]))
		case []ReadSetEntry:
			f.Set(reflect.ValueOf([][]ReadSetEntry{nil, {}, {{"d", 1}}, {{"a", 0}, {"b\"", math.MaxUint64}}}[r.IntN(4)]))
		case VectorClock:
			f.Set(reflect.ValueOf([]VectorClock{nil, {}, {"a": 0}, {"a": 1}, {"z": 3, "a": 1, "m": 2, "é": 9, "\xff": 4, "\U0001F600": 5, "\uFB01": 6}}[r.IntN(5)]))
		case time.Time:
			f.Set(reflect.ValueOf(encTimes[r.IntN(len(encTimes))]))
		case *Cert:
			if depth == 0 && r.IntN(2) == 0 {
				c := new(Cert)
				fillRandom(t, r, reflect.ValueOf(c), depth+1)
				f.Set(reflect.ValueOf(c))
			} else {
				f.Set(reflect.Zero(f.Type()))
			}
		default:
			t.Fatalf("field %s has type %s, which the record encoder test does not know: teach appendRecord and this test", name, f.Type())
		}
	}
}

// checkEncoding compares appendRecord with encoding/json on rec; it reports whether
// appendRecord wrote the record itself. appendRecord leaves out one member encoding/json
// writes: a cert's result_bytes when its result holds the same bytes (storedForm). Both
// forms must decode to the same record.
func checkEncoding(t testing.TB, rec *Record) bool {
	want, werr := marshalRaw(rec)
	got, ok := appendRecord(nil, rec)
	if ok && (werr != nil || !bytes.Equal(got, storedForm(want, rec))) {
		t.Fatalf("appendRecord differs from encoding/json (%v):\n got %s\nwant %s\nrecord %#v", werr, got, storedForm(want, rec), rec)
	}
	b, err := EncodeRecord(rec)
	if (err != nil) != (werr != nil) || ok && !bytes.Equal(b, got) || !ok && !bytes.Equal(b, want) {
		t.Fatalf("EncodeRecord = %s, %v; encoding/json %s, %v", b, err, want, werr)
	}
	if werr == nil {
		var fromStored, fromJSON Record
		serr, jerr := json.Unmarshal(b, &fromStored), json.Unmarshal(want, &fromJSON)
		if (serr != nil) != (jerr != nil) || !reflect.DeepEqual(fromStored, fromJSON) {
			t.Fatalf("the stored form decodes to another record than encoding/json's (%v, %v):\nstored %s\n  json %s\n%#v\n%#v", serr, jerr, b, want, fromStored.Cert, fromJSON.Cert)
		}
	}
	return ok
}

// storedForm is encoding/json's form of rec (want) as EncodeRecord writes it: without the
// cert's result_bytes when its result is already there byte for byte (readable, compact JSON).
func storedForm(want []byte, rec *Record) []byte {
	c := rec.Cert
	if c == nil || c.ResultSHA256 == "" || len(c.Result) == 0 || !readable(c.Result) || !spaceless(c.Result) {
		return want
	}
	member := `,"result_bytes":"` + base64.StdEncoding.EncodeToString(c.Result) + `"}`
	return bytes.Replace(want, []byte(member), []byte("}"), 1)
}

func TestEncodeRecordMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	const n = 20000
	for range n {
		rec := new(Record)
		fillRandom(t, r, reflect.ValueOf(rec), 0)
		if checkEncoding(t, rec) {
			fast++
		}
	}
	if fast < n/50 {
		t.Fatalf("appendRecord wrote only %d of %d records itself", fast, n)
	}
	// A record as the engine writes them takes the fast path.
	now := time.Now()
	rec := &Record{Intent: "i", State: StateDone, Fingerprint: "f", Token: 1, Tool: "t", Args: json.RawMessage(`{"q":"a b"}`),
		Clock: VectorClock{"a": 1}, ClaimedAt: now, LeaseUntil: now, UpdatedAt: now,
		Cert: &Cert{Intent: "i", Args: json.RawMessage(`{"q":"a b"}`), Result: json.RawMessage(`{"r":"<&>"}`), ResultSHA256: "x", Clock: VectorClock{"a": 1}, ReadSet: []ReadSetEntry{}}}
	if !checkEncoding(t, rec) {
		t.Fatal("an ordinary done record took the slow path")
	}
	// A result nested deeper than MaxNesting: null beside its result_bytes, on either path.
	deep := *rec.Cert
	deep.Result = json.RawMessage(strings.Repeat("[", MaxNesting+1) + strings.Repeat("]", MaxNesting+1))
	rec.Cert = &deep
	if !checkEncoding(t, rec) {
		t.Fatal("a done record with a deep result took the slow path")
	}
	if b, _ := EncodeRecord(rec); !bytes.Contains(b, []byte(`"result":null,`)) || !bytes.Contains(b, []byte(`"result_bytes":"`)) {
		t.Fatalf("a deep result is stored as %.300s...", b)
	}
}

func FuzzEncodeRecord(f *testing.F) {
	f.Add(uint64(1), []byte(`{"a": [1, "x y"]}`), "s\"x\xff")
	f.Add(uint64(7), []byte("\t{}"), "\u2028")
	f.Fuzz(func(t *testing.T, seed uint64, raw []byte, s string) {
		r := rand.New(rand.NewPCG(seed, 0))
		rec := new(Record)
		fillRandom(t, r, reflect.ValueOf(rec), 0)
		rec.Args, rec.Reason, rec.Agent = raw, s, s
		rec.Clock = VectorClock{s: 1, "b": 2}
		if rec.Cert != nil {
			rec.Cert.Result, rec.Cert.Agent = raw, s
		}
		checkEncoding(t, rec)
	})
}

// The record EncodeRecordDecoded gives is the one json.Unmarshal gives back from its bytes,
// and shares no memory with the original.
func TestEncodeRecordDecoded(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	twins := 0
	const n = 20000
	for i := range n {
		rec := new(Record)
		fillRandom(t, r, reflect.ValueOf(rec), 0)
		if i%2 == 0 {
			rec.Cert = nil
		}
		if i%3 == 0 { // as the engine's clock gives them
			now := time.Now()
			rec.ClaimedAt, rec.LeaseUntil, rec.UpdatedAt = now, now.Add(time.Minute), now
		}
		want, werr := EncodeRecord(rec)
		b, twin, err := EncodeRecordDecoded(rec, len(want)) // a twin when it can tell one
		if !bytes.Equal(b, want) || (err != nil) != (werr != nil) {
			t.Fatalf("EncodeRecordDecoded = %s, %v; EncodeRecord %s, %v", b, err, want, werr)
		}
		if twin == nil {
			continue
		}
		// Over maxTwin: the same bytes, and no twin.
		if b2, twin2, err := EncodeRecordDecoded(rec, len(b)-1); err != nil || !bytes.Equal(b2, b) || twin2 != nil {
			t.Fatalf("EncodeRecordDecoded with maxTwin %d under the %d bytes = %s, %v, twin %v", len(b)-1, len(b), b2, err, twin2)
		}
		twins++
		var back Record
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("decoding %s: %v", b, err)
		}
		if !reflect.DeepEqual(twin, &back) {
			t.Fatalf("twin differs from the decoded record:\n twin %#v\n back %#v\n json %s", twin, &back, b)
		}
		if len(rec.Args) > 0 && &rec.Args[0] == &twin.Args[0] || len(rec.ExactArgs) > 0 && &rec.ExactArgs[0] == &twin.ExactArgs[0] ||
			len(rec.ReadSet) > 0 && &rec.ReadSet[0] == &twin.ReadSet[0] || len(rec.Redacted) > 0 && &rec.Redacted[0] == &twin.Redacted[0] {
			t.Fatalf("twin shares memory with the record: %#v", twin)
		}
	}
	if twins < n/100 {
		t.Fatalf("only %d twins of %d records", twins, n)
	}
	t.Logf("%d twins of %d records", twins, n)
}

// appendJSONString writes every string as encoding/json does without HTML escaping, whatever
// bytes it holds.
func FuzzAppendJSONString(f *testing.F) {
	for _, s := range encStrings {
		f.Add(s)
	}
	f.Add("01234567\"89abcdef\\ghijklm\x1fnopqrstu\x80vwxyz\u2028")
	f.Fuzz(func(t *testing.T, s string) {
		for _, in := range []string{s, "plain " + s + " plain"} {
			want, err := marshalRaw(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendJSONString(nil, in); !bytes.Equal(got, want) {
				t.Fatalf("appendJSONString(%q) = %s, encoding/json %s", in, got, want)
			}
		}
	})
}
