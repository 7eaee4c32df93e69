package fence

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"
)

// checkDecode decodes body with DecodeRecord and json.Unmarshal and fails unless they agree:
// both refuse it, or both give the same record. It reports whether body decoded.
func checkDecode(t testing.TB, body []byte) bool {
	t.Helper()
	var want, got Record
	werr := json.Unmarshal(body, &want)
	gerr := DecodeRecord(bytes.Clone(body), &got)
	if errors.Is(werr, errReadableDiffers) {
		// Cert.UnmarshalJSON compares a cert's readable result with result_bytes; DecodeRecord
		// leaves that to nobody: a record's readable result is never read (see storedCert).
		return false
	}
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("DecodeRecord: %v; json.Unmarshal: %v\nbody %q", gerr, werr, body)
	}
	if werr == nil && !reflect.DeepEqual(&got, &want) {
		t.Fatalf("DecodeRecord gives another record than json.Unmarshal:\n got %#v\n     %#v\nwant %#v\n     %#v\nbody %s", got, got.Cert, want, want.Cert, body)
	}
	return werr == nil
}

// within reports whether the bytes of piece lie inside buf.
func within(piece, buf []byte) bool {
	if len(piece) == 0 || len(buf) == 0 {
		return false
	}
	p, b := uintptr(unsafe.Pointer(unsafe.SliceData(piece))), uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	return p >= b && p+uintptr(len(piece)) <= b+uintptr(len(buf))
}

func TestDecodeRecordMatchesUnmarshal(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	decoded, fast := 0, 0
	const n = 20000
	for i := range n {
		rec := new(Record)
		fillRandom(t, r, reflect.ValueOf(rec), 0)
		if i%2 == 0 {
			plainStrings(reflect.ValueOf(rec).Elem())
		}
		// Both forms a store meets: EncodeRecord's and encoding/json's (earlier builds').
		for _, enc := range []func(*Record) ([]byte, error){EncodeRecord, func(r *Record) ([]byte, error) { return marshalRaw(r) }} {
			b, err := enc(rec)
			if err != nil {
				continue
			}
			if checkDecode(t, b) {
				decoded++
			}
			var w record
			if decodeFast(b, &w) {
				fast++
			}
			// A cut or a changed byte: both refuse it, or both read the same record.
			if len(b) > 2 {
				checkDecode(t, b[:r.IntN(len(b))])
				m := bytes.Clone(b)
				const bytesOfJSON = "{}[]\",:0an\\ "
				m[r.IntN(len(m))] = bytesOfJSON[r.IntN(len(bytesOfJSON))]
				checkDecode(t, m)
			}
		}
		if i%100 == 0 { // members twice, names in other cases, values of other types
			for _, s := range []string{
				`{"intent":"a","args":{"x":1},"args":[2],"cert":{"args":1,"ARGS":2,"result":"r","Result_Bytes":"AQI="}}`,
				`{"Intent":"a","ARGS":{"x":1},"Cert":{"Result":[1,2]}}`,
				`{"intent":"a","args":null,"cert":null}`,
				`{"intent":"a","cert":"x"}`,
				`{"intent":"a","args":"x","exact_args":"!!"}`,
				`{"intent":"a","token":-1}`,
				`{"intent":"a","cert":{"result":null,"result_bytes":null}}`,
				// A cert twice: the second replaces the first whole, as Cert.UnmarshalJSON
				// does (before, the fallback merged them: the first's result and hash stayed).
				`{"cert":{"hash":"h1","result_bytes":"AQI="},"cert":{"intent":"x"}}`,
				`{"cert":{"hash":"h1","vector_clock":{"a":1},"read_set":[{"domain":"d"}]},"Cert":{}}`,
				`[]`, `null`, ``,
			} {
				checkDecode(t, []byte(s))
			}
		}
	}
	if decoded < n/5 {
		t.Fatalf("only %d of %d encodings decoded", decoded, 2*n)
	}
	// Random strings hold escapes and bytes that are not UTF-8, which the one-pass way leaves
	// to encoding/json; enough records are without them to try it on every kind of member.
	if fast < n/20 {
		t.Fatalf("only %d of %d encodings decoded in one pass", fast, 2*n)
	}
	t.Logf("%d of %d encodings decoded, the same by both; %d of them in one pass", decoded, 2*n, fast)
}

// plainStrings replaces every string in v (a struct, or a pointer, slice or map holding them)
// that JSON writes with an escape, or that is not UTF-8, by one that needs neither, as a
// store's records mostly are.
func plainStrings(v reflect.Value) {
	plain := func(s string) string {
		if strings.ContainsAny(s, "\"\\<>&\u2028\u2029") || !utf8.ValidString(s) || strings.ContainsFunc(s, func(c rune) bool { return c < 0x20 }) {
			return "plain é " + strconv.Itoa(len(s))
		}
		return s
	}
	if v.Type() == reflect.TypeFor[time.Time]() {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(plain(v.String()))
	case reflect.Pointer:
		if !v.IsNil() {
			plainStrings(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			plainStrings(v.Field(i))
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() != reflect.Uint8 { // bytes are base64 or raw JSON
			for i := range v.Len() {
				plainStrings(v.Index(i))
			}
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		m := reflect.MakeMap(v.Type())
		for it := v.MapRange(); it.Next(); {
			m.SetMapIndex(reflect.ValueOf(plain(it.Key().String())).Convert(v.Type().Key()), it.Value())
		}
		v.Set(m)
	}
}

// DecodeRecord copies no raw value: the args, the cert's args and its result are pieces of
// the body.
func TestDecodeRecordCopiesNoRawValue(t *testing.T) {
	big := `{"memo":"` + strings.Repeat("x", 1<<20) + `"}`
	rec := &Record{Intent: "i", State: StateDone, Tool: "t", Args: json.RawMessage(big),
		Cert: &Cert{Intent: "i", Args: json.RawMessage(big), Result: json.RawMessage(`{"ok":true}`), ResultSHA256: "x"}}
	body, err := EncodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	var got Record
	if err := DecodeRecord(body, &got); err != nil {
		t.Fatal(err)
	}
	for what, piece := range map[string][]byte{"args": got.Args, "cert args": got.Cert.Args, "cert result": got.Cert.Result} {
		if !within(piece, body) {
			t.Errorf("%s: copied out of the body", what)
		}
	}
	// What decoding allocates is the record's small fields, not its raw values (2 MiB here;
	// json.Unmarshal allocates them again, 2 MiB and more).
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var again Record
	if err := DecodeRecord(body, &again); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("decoding a record of %d bytes allocated %d bytes", len(body), n)
	}
}

// The wire types of DecodeRecord have every field of Record and Cert, in their order, with
// their tags and types (raw values read as rawPiece; result_bytes after Cert's fields): a field
// added to either must be added there, or DecodeRecord would drop it.
func TestDecodeRecordWireHasEveryField(t *testing.T) {
	for _, c := range []struct {
		model, wire reflect.Type
		extra       []string
	}{{reflect.TypeFor[Record](), reflect.TypeFor[record](), nil}, {reflect.TypeFor[Cert](), reflect.TypeFor[storedCert](), []string{"ResultBytes"}}} {
		if c.wire.NumField() != c.model.NumField()+len(c.extra) {
			t.Fatalf("%s has %d fields, %s %d (+%v)", c.wire, c.wire.NumField(), c.model, c.model.NumField(), c.extra)
		}
		for i := range c.model.NumField() {
			m, w := c.model.Field(i), c.wire.Field(i)
			same := w.Type == m.Type ||
				m.Type == reflect.TypeFor[json.RawMessage]() && w.Type == reflect.TypeFor[rawPiece]() ||
				m.Type == reflect.TypeFor[*Cert]() && w.Type == reflect.TypeFor[*storedCert]()
			if m.Name != w.Name || m.Tag != w.Tag || !same {
				t.Errorf("%s field %d: %s %s %q; %s has %s %s %q", c.model, i, m.Name, m.Type, m.Tag, c.wire, w.Name, w.Type, w.Tag)
			}
		}
	}
}

// wrapSizedRecord is a done record the size of wrap's (about 1.1 KB encoded): 0.45 KB of
// arguments, held twice (the record's and its cert's), a read set, a vector clock, a result.
func wrapSizedRecord() *Record {
	now := time.Date(2026, 12, 5, 12, 0, 0, 123456789, time.UTC)
	args := fmt.Appendf(nil, `{"entities":[{"entityType":"order","name":"order-0000042","observations":[%q]}]}`, strings.Repeat("lorem ipsum dolor sit amet ", 15))
	return &Record{Intent: "wrap:memory:create_entities:4f1c2a", State: StateDone, Fingerprint: strings.Repeat("ab", 32), Token: 42,
		Nonce: strings.Repeat("0f", 16), Owner: "host-a/4242/1733300000/8d7e2b1c-0a4f-4c55-9c1e-2f5b7d9e1a3c/4026531836", Agent: "agent-7",
		Tool: "create_entities", Args: args, ReadSet: []ReadSetEntry{{Domain: "orders", Seq: 41}}, Clock: VectorClock{"agent-7": 43},
		ClaimedAt: now, LeaseUntil: now.Add(time.Minute), UpdatedAt: now, ExpiresAt: now.Add(24 * time.Hour),
		Cert: &Cert{Intent: "wrap:memory:create_entities:4f1c2a", Tool: "create_entities", Args: args, Agent: "agent-7",
			Result: []byte(`{"content":[{"type":"text","text":"created 1 entity: order-0000042\nobservations: 1"}]}`),
			Clock:  VectorClock{"agent-7": 43}, ReadSet: []ReadSetEntry{{Domain: "orders", Seq: 41}}, Hash: strings.Repeat("cd", 32)}}
}

// BenchmarkDecodeRecord decodes a wrap-sized done record, as a ledger view does for every
// record it lists and a store does for a replay its cache has not seen.
func BenchmarkDecodeRecord(b *testing.B) {
	body, err := EncodeRecord(wrapSizedRecord())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var rec Record
		if err := DecodeRecord(body, &rec); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeRecord: on any body, DecodeRecord and json.Unmarshal agree (both refuse it, or
// both give the same record), whichever of its two ways DecodeRecord took.
func FuzzDecodeRecord(f *testing.F) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 64 {
		rec := new(Record)
		fillRandom(f, r, reflect.ValueOf(rec), 0)
		if b, err := EncodeRecord(rec); err == nil {
			f.Add(b)
		}
	}
	if b, err := EncodeRecord(wrapSizedRecord()); err == nil {
		f.Add(b)
	}
	for _, s := range []string{`{"token":18446744073709551615}`, `{"token":18446744073709551616}`, `{"seq":01}`, `{"seq":1.0}`,
		`{"vector_clock":{"a":1,"a":2}}`, `{"read_set":[null]}`, `{"read_set":[{"domain":"d","domain":"e"}]}`, `{"exact_args":""}`,
		`{"args":[1,{"a":[]}]} `, `{"cert":{"result":"x","result_bytes":"AQI="}}`, `{"cert":{"hash":"h1","result_bytes":"AQI="},"cert":{"intent":"x"}}`, `{"claimed_at":"2026-12-05T12:00:00+05:30"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDecode(t, body) })
}

// A record as wrap writes it takes the one-pass way: were it left to encoding/json, every
// ledger view and every replay the cache has not seen would read it about six times slower
// (BenchmarkDecodeRecord: 22-24 µs against 3.4-4.2 µs).
func TestWrapRecordDecodesInOnePass(t *testing.T) {
	rec := wrapSizedRecord()
	r := rand.New(rand.NewPCG(9, 10))
	for range 200 {
		// Every state and optional member a store writes, in turn.
		rec.State = []State{StateInFlight, StateDone, StateFailed, StateUnknown}[r.IntN(4)]
		rec.Reason = []string{"", "holder is gone"}[r.IntN(2)]
		rec.ExactArgs = [][]byte{nil, {1, 2, 3}}[r.IntN(2)]
		rec.Redacted = [][]string{nil, {"$.card"}}[r.IntN(2)]
		rec.RerunSafe = r.IntN(2) == 0
		rec.KeepResult = []KeepResult{"", KeepHash}[r.IntN(2)]
		rec.Cert.ReadSet = [][]ReadSetEntry{nil, {{Domain: "orders", Seq: 41}}}[r.IntN(2)]
		rec.Cert.Clock = []VectorClock{nil, {}, {"agent-7": 43}}[r.IntN(3)]
		rec.ReadSet = [][]ReadSetEntry{nil, {{Domain: "orders", Seq: 41}}}[r.IntN(2)]
		rec.Clock = []VectorClock{nil, {"agent-7": 43}}[r.IntN(2)]
		rec.Parent, rec.Domain, rec.Seq = "", "", 0
		if r.IntN(2) == 0 {
			rec.Parent, rec.Domain, rec.Seq = strings.Repeat("ef", 32), "orders", 7
		}
		enc := *rec
		if enc.State == StateInFlight {
			enc.Cert = nil
		}
		body, err := EncodeRecord(&enc)
		if err != nil {
			t.Fatal(err)
		}
		var w record
		if !decodeFast(body, &w) {
			t.Fatalf("decodeFast left a store's record to encoding/json: %s", body)
		}
		checkDecode(t, body)
	}
}

// FuzzDecodeRecordSplice: bodies close to the ones stores write (a done record as wrap writes
// it, an in-flight claim, a record with every optional member) with bytes put in and taken out
// at one place, so that most stay in the shape decodeFast reads and it is tried on what a
// value may hold. DecodeRecord and json.Unmarshal must agree on each.
func FuzzDecodeRecordSplice(f *testing.F) {
	var bases [][]byte
	done := wrapSizedRecord()
	claim := *done
	claim.State, claim.Cert = StateInFlight, nil
	full := *done
	full.Parent, full.Domain, full.Seq, full.Reason, full.ExactArgs = strings.Repeat("ef", 32), "orders", 7, "holder is gone", []byte{1, 2, 3}
	full.RerunSafe, full.KeepResult, full.Redacted = true, KeepHash, []string{"$.card"}
	for _, rec := range []*Record{done, &claim, &full} {
		b, err := EncodeRecord(rec)
		if err != nil {
			f.Fatal(err)
		}
		bases = append(bases, b)
	}
	for _, s := range []string{`"`, `\`, `\u00e9`, "\xff", `1.5`, `-1`, `null`, `{}`, `[]`, `,"x":1`, ` `, `18446744073709551616`, `01`, `"a":1,"a":2`} {
		f.Add(uint8(0), uint16(120), uint8(0), []byte(s))
		f.Add(uint8(1), uint16(300), uint8(1), []byte(s))
		f.Add(uint8(2), uint16(900), uint8(2), []byte(s))
	}
	f.Fuzz(func(t *testing.T, which uint8, at uint16, cut uint8, put []byte) {
		base := bases[int(which)%len(bases)]
		i := int(at) % (len(base) + 1)
		j := min(i+int(cut)%16, len(base))
		body := append(append(append([]byte{}, base[:i]...), put...), base[j:]...)
		checkDecode(t, body)
	})
}
