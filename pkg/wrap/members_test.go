package wrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/canon"
)

// decoderInjectKey and decoderRemoveMember are injectKey and removeMember as they were, with a
// json.Decoder read token by token: the reference the scanners' versions must agree with.
func decoderInjectKey(args []byte, prop, value string) ([]byte, bool) {
	ms, err := decoderMembers(args)
	if ms == nil && err != nil {
		return args, false
	}
	v, _ := json.Marshal(value)
	for _, m := range ms {
		if m.name != prop {
			continue
		}
		if t := string(m.raw); t != `""` && t != "null" {
			return args, false
		}
		return append(append(append([]byte{}, args[:m.end-len(m.raw)]...), v...), args[m.end:]...), true
	}
	if err != nil {
		return args, false
	}
	open := bytes.IndexByte(args, '{')
	out := append([]byte{}, args[:open+1]...)
	out = append(out, `"`+prop+`":`...)
	out = append(out, v...)
	if len(ms) > 0 {
		out = append(out, ',')
	}
	return append(out, args[open+1:]...), true
}

func decoderRemoveMember(args []byte, name string) ([]byte, bool) {
	ms, err := decoderMembers(args)
	if err != nil {
		return args, false
	}
	hit := slices.IndexFunc(ms, func(m decoderMember) bool { return m.name == name })
	if hit < 0 {
		return args, false
	}
	s := ms[hit]
	out := append([]byte{}, args[:s.start]...)
	switch {
	case hit > 0:
	case len(ms) > 1:
		s.end = ms[1].start + bytes.IndexByte(args[ms[1].start:], ',') + 1
	}
	return append(out, args[s.end:]...), true
}

// decoderMember is a top-level member as the json.Decoder versions read it: its name, where
// reading it began (after the previous value, or the '{'), its value and where that ends.
type decoderMember struct {
	name       string
	start, end int
	raw        json.RawMessage
}

// decoderMembers reads the members of the object args with a json.Decoder, token by token, up
// to the first that does not read; err says why it stopped early (ms is nil when args is not
// an object).
func decoderMembers(args []byte) (ms []decoderMember, err error) {
	d := json.NewDecoder(bytes.NewReader(args))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not an object")
	}
	ms = []decoderMember{}
	for d.More() {
		m := decoderMember{start: int(d.InputOffset())}
		tok, err := d.Token()
		if err != nil {
			return ms, err
		}
		if err := d.Decode(&m.raw); err != nil {
			return ms, err
		}
		m.name, _ = tok.(string)
		m.end = int(d.InputOffset())
		ms = append(ms, m)
	}
	return ms, nil
}

// randomArgs writes an arguments object: members in random order with white space anywhere,
// names escaped or not, one of them maybe the name looked for, values of every kind.
func randomArgs(r *rand.Rand, name string) []byte {
	ws := func() string { return []string{"", "", " ", "\n\t", "  "}[r.IntN(5)] }
	var b strings.Builder
	b.WriteString(ws() + "{" + ws())
	n := r.IntN(5)
	at := r.IntN(n + 2) // the member named name, if at < n
	for i := range n {
		if i > 0 {
			b.WriteString(ws() + "," + ws())
		}
		key := []string{`a`, `b\"`, `\u006b`, `é`, `x` + fmt.Sprint(i)}[r.IntN(5)]
		if i == at {
			key = name
			if r.IntN(3) == 0 {
				key = `\u` + fmt.Sprintf("%04x", name[0]) + name[1:]
			}
		}
		b.WriteString(`"` + key + `"` + ws() + ":" + ws())
		b.WriteString([]string{`null`, `""`, `"v"`, `1.50`, `[1,{"k":null}]`, `{"effectfence_repeat":1}`, `true`}[r.IntN(7)])
	}
	b.WriteString(ws() + "}" + ws())
	return []byte(b.String())
}

// TestMembersEditedAsByTheDecoder: injectKey and removeMember give the bytes the json.Decoder
// versions gave, on random arguments.
func TestMembersEditedAsByTheDecoder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 2026))
	for range 20000 {
		args := randomArgs(r, "k")
		got, gotOK := injectKey(args, "k", "H")
		want, wantOK := decoderInjectKey(args, "k", "H")
		if gotOK != wantOK || string(got) != string(want) {
			t.Fatalf("injectKey(%s) = %s %v, the decoder's %s %v", args, got, gotOK, want, wantOK)
		}
		args = randomArgs(r, RepeatArg)
		got, gotOK = removeMember(args, RepeatArg)
		want, wantOK = decoderRemoveMember(args, RepeatArg)
		if gotOK != wantOK || string(got) != string(want) {
			t.Fatalf("removeMember(%s) = %s %v, the decoder's %s %v", args, got, gotOK, want, wantOK)
		}
	}
	for _, bad := range []string{``, `[]`, `{"a":}`, `{"a":1`, `{"a":1}x`, `"k"`} {
		if out, ok := injectKey([]byte(bad), "k", "H"); ok || string(out) != bad {
			t.Errorf("injectKey(%q) = %q %v", bad, out, ok)
		}
		if out, ok := removeMember([]byte(bad+`\`), RepeatArg); ok || string(out) != bad+`\` {
			t.Errorf("removeMember(%q) = %q %v", bad, out, ok)
		}
	}
}

// TestMembersEditedInOnePass: editing the arguments of a large call costs one copy of them,
// whatever their number of members (the json.Decoder versions allocated 17 bytes per byte).
// Bytes allocated are counted, not time.
func TestMembersEditedInOnePass(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{`)
	for i := range 1 << 16 {
		fmt.Fprintf(&b, `"k%06d":[1,"\n"],`, i)
	}
	b.WriteString(`"effectfence_repeat":"1","request_id":null}`)
	args := []byte(b.String())
	for _, c := range []struct {
		what string
		edit func() ([]byte, bool)
	}{
		{"removeMember", func() ([]byte, bool) { return removeMember(args, RepeatArg) }},
		{"injectKey", func() ([]byte, bool) { return injectKey(args, "request_id", "H") }},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, ok := c.edit()
		runtime.ReadMemStats(&after)
		if !ok || !json.Valid(out) {
			t.Fatalf("%s: %v", c.what, ok)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(len(args))+64<<10 {
			t.Errorf("%s allocated %d bytes for arguments of %d bytes", c.what, alloc, len(args))
		}
	}
}

// decodedLookup is how identify read a --key field before: from the decoded arguments.
func decodedLookup(v any, p Path) any {
	for _, seg := range p {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[seg]
	}
	return v
}

// TestKeyFieldsReadAsDecoded: the --key fields read from the canonical bytes name the call
// as the fields read from the decoded arguments did, present, absent, under a non-object, with
// escaped names and numbers of every spelling.
func TestKeyFieldsReadAsDecoded(t *testing.T) {
	args := []string{
		`{"order":{"id":"A-1","n":1.50e1},"x":[1,{"id":2}],"\u006bey":"é<&>","z":null,"s":"str"}`,
		`{}`, `{"order":7}`, `{"order":{"id":{"deep":[1,2,{"a":"b"}]}}}`,
	}
	paths := [][]Path{{{"order", "id"}}, {{"order"}, {"key"}}, {{"x", "id"}}, {{"z"}, {"missing", "id"}}, {{"s", "id"}}, {{"order", "n"}}}
	for _, a := range args {
		for _, key := range paths {
			got, err := identify("scope", "tool", []byte(a), nil, key)
			if err != nil {
				t.Fatal(err)
			}
			c, err := canon.JSON([]byte(a))
			if err != nil {
				t.Fatal(err)
			}
			v, err := decode(c)
			if err != nil {
				t.Fatal(err)
			}
			fields := map[string]any{}
			for _, p := range key {
				fields[p.String()] = decodedLookup(v, p)
			}
			named, err := canon.Marshal(fields)
			if err != nil {
				t.Fatal(err)
			}
			obj := append(append([]byte(`{"args":`), named...), `,"scope":"scope","tool":"tool"}`...)
			if want := canon.Sum(obj); got.hash != want {
				t.Errorf("%s with --key %v: hash of %s, want of %s", a, key, got.hash, named)
			}
		}
	}
}

// TestKeyFieldsReadWithoutDecoding: --key costs what the fields' values cost, not a decoding
// of all the arguments (which took 40 bytes of allocation per byte of them). Bytes allocated
// are counted, not time.
func TestKeyFieldsReadWithoutDecoding(t *testing.T) {
	args, c := wideArgs(t, `{"id":"A-1"}`)
	without, with := identifyAlloc(t, args, c, nil, nil), identifyAlloc(t, args, c, nil, []Path{{"order", "id"}, {"k000001"}})
	if with > without+64<<10 {
		t.Fatalf("--key on arguments of %d bytes allocated %d bytes more than without", len(args), with-without)
	}
}

// remove and decode are how identify left --ignore-field out before: it deleted the member
// from the decoded arguments and canonicalised the rest.

// remove deletes the member at p from v (a decoded JSON value), if present.
func remove(v any, p Path) {
	for i, seg := range p {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		if i == len(p)-1 {
			delete(m, seg)
			return
		}
		v = m[seg]
	}
}

// decode parses JSON keeping numbers as json.Number, so re-encoding changes no value.
func decode(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

// TestIgnoredFieldsCutAsDecoded: cutting --ignore-field members from the canonical bytes
// gives what deleting them from the decoded arguments and canonicalising gave: members first,
// last, alone, nested, absent, under a non-object, with escaped names.
func TestIgnoredFieldsCutAsDecoded(t *testing.T) {
	args := []string{
		`{"order":{"id":"A-1","n":1.50e1,"ts":3},"x":[1,{"id":2}],"\u0074s":"é<&>","z":null}`,
		`{}`, `{"ts":1}`, `{"a":1,"ts":2}`, `{"ts":1,"a":2}`, `{"order":7,"ts":{"ts":1}}`, `{"order":{"ts":1}}`,
	}
	ignores := [][]Path{{{"ts"}}, {{"order", "ts"}}, {{"order", "id"}, {"ts"}, {"z"}}, {{"x", "id"}}, {{"order", "ts", "deeper"}}, {{"missing"}}, {{"ts", "ts"}, {"order"}}}
	for _, a := range args {
		for _, ignore := range ignores {
			got, err := identify("scope", "tool", []byte(a), ignore, nil)
			if err != nil {
				t.Fatal(err)
			}
			v, err := decode([]byte(a))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range ignore {
				remove(v, p)
			}
			want, err := canon.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if string(got.args) != string(want) {
				t.Errorf("%s without %v: %s, want %s", a, ignore, got.args, want)
			}
		}
	}
}

// TestIgnoredFieldsCutWithoutDecoding: --ignore-field costs a copy of the arguments per
// field, not a decoding and encoding of all of them (68 bytes of allocation per byte of
// arguments). Bytes allocated are counted, not time.
func TestIgnoredFieldsCutWithoutDecoding(t *testing.T) {
	args, c := wideArgs(t, `{"id":"A-1","ts":1}`)
	without, with := identifyAlloc(t, args, c, nil, nil), identifyAlloc(t, args, c, []Path{{"order", "ts"}, {"k000001"}}, nil)
	if with > without+2*uint64(len(c))+64<<10 {
		t.Fatalf("--ignore-field of two fields in arguments of %d bytes allocated %d bytes more than without", len(args), with-without)
	}
}

// wideArgs is an arguments object of 65,536 members and then "order" with the value order,
// and its canonical form.
func wideArgs(t *testing.T, order string) (args, c []byte) {
	var b strings.Builder
	b.WriteString(`{`)
	for i := range 1 << 16 {
		fmt.Fprintf(&b, `"k%06d":[1,"x"],`, i)
	}
	b.WriteString(`"order":` + order + `}`)
	args = []byte(b.String())
	c, err := canon.JSON(args)
	if err != nil {
		t.Fatal(err)
	}
	return args, c
}

// identifyAlloc is how many bytes identifyCanon allocates to name a call of args (canonical
// form c) with the given --ignore-field and --key paths.
func identifyAlloc(t *testing.T, args, c []byte, ignore, key []Path) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := identifyCanon("scope", "tool", args, c, ignore, key); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
