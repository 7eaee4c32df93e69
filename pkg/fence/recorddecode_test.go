package fence

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"
)

// checkDecode decodes body with DecodeRecord and json.Unmarshal and fails unless they agree:
// both refuse it, or both give the same record. It reports whether body decoded.
func checkDecode(t testing.TB, body []byte) bool {
	t.Helper()
	var want, got Record
	werr := json.Unmarshal(body, &want)
	gerr := DecodeRecord(bytes.Clone(body), &got)
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
	r := rand.New(rand.NewPCG(5, 6))
	decoded := 0
	const n = 20000
	for i := range n {
		rec := new(Record)
		fillRandom(t, r, reflect.ValueOf(rec), 0)
		// Both forms a store meets: EncodeRecord's and encoding/json's (earlier builds').
		for _, enc := range []func(*Record) ([]byte, error){EncodeRecord, func(r *Record) ([]byte, error) { return marshalRaw(r) }} {
			b, err := enc(rec)
			if err != nil {
				continue
			}
			if checkDecode(t, b) {
				decoded++
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
				`[]`, `null`, ``,
			} {
				checkDecode(t, []byte(s))
			}
		}
	}
	if decoded < n/5 {
		t.Fatalf("only %d of %d encodings decoded", decoded, 2*n)
	}
	t.Logf("%d of %d encodings decoded, the same by both", decoded, 2*n)
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
