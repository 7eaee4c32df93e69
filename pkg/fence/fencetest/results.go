package fencetest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
)

// HostileResult is a result a tool may return, and what it is.
type HostileResult struct {
	Name   string
	Result []byte
}

// HostileResults are results a store must give back byte for byte, whatever form it keeps
// them in: the ones encoding/json rewrites (escapes, spaces, numbers it cannot hold), the
// ones no canonicaliser accepts (lone surrogates, duplicate members, invalid UTF-8), and the
// ones at the edges of size and nesting. A nil result is recorded as null.
func HostileResults() []HostileResult {
	deep := func(n int, open, inner, close string) []byte {
		return []byte(strings.Repeat(open, n) + inner + strings.Repeat(close, n))
	}
	large := func(n int) []byte {
		b := make([]byte, 0, n+64)
		b = append(b, `{"data":"`...)
		for len(b) < n {
			b = append(b, "0123456789abcdef<>&\u2028"...)
		}
		return append(b, `"}`...)
	}
	return []HostileResult{
		{"compact", []byte(`{"a":1,"b":[true,false,null],"c":"x"}`)},
		{"spaced", []byte(`{ "a" : 1 , "b" : [ true ] }`)},
		{"tabs and newlines", []byte("{\t\"a\":\r\n1}")},
		{"trailing newline", []byte("{\"a\":1}\n")},
		{"leading space", []byte(` "x"`)},
		{"control escapes", []byte(`"\u0000\u0001\u001f\b\f\n\r\t"`)},
		{"upper-case hex escapes", []byte(`"\u001F\u00E9\uABCD"`)},
		{"line separator escapes", []byte(`"\u2028\u2029"`)},
		{"quote backslash solidus", []byte(`"\"\\\/"`)},
		{"raw line separators", []byte("\"a\u2028b\u2029c\"")},
		{"html", []byte(`"<script>&amp;</script>"`)},
		{"html escaped", []byte(`"\u003c\u003e\u0026"`)},
		{"raw non-ASCII", []byte(`"café 日本 😀"`)},
		{"escaped non-ASCII", []byte(`"caf\u00e9 \u65e5 \ud83d\ude00"`)},
		{"lone high surrogate", []byte(`"\ud800"`)},
		{"lone low surrogate", []byte(`{"s":"x\udc00y"}`)},
		{"invalid UTF-8", []byte("\"a\xffb\xc0\xaf\xed\xa0\x80\"")},
		{"invalid UTF-8 in a member name", []byte("{\"\xfe\":1}")},
		{"duplicate members", []byte(`{"a":1,"a":2}`)},
		{"huge exponent", []byte(`1e400`)},
		{"minus zero", []byte(`-0`)},
		{"minus zero float", []byte(`[-0.0,-0e0]`)},
		{"one point zero", []byte(`1.0`)},
		{"big integer", []byte(`100000000000000000000001`)},
		{"tiny", []byte(`[5e-324,1E-400,0.1e1]`)},
		{"null", []byte(`null`)},
		{"nil", nil},
		{"empty", []byte{}},
		{"bare string", []byte(`"null"`)},
		{"true", []byte(`true`)},
		{"empty object", []byte(`{}`)},
		{"empty array", []byte(`[]`)},
		{"nested 1000", deep(1000, `{"a":`, `1`, `}`)},
		{"nested 9997", deep(9997, `[`, ``, `]`)},
		{"nested 9998", deep(9998, `[`, ``, `]`)},
		{"nested 9999", deep(9999, `[`, ``, `]`)},
		{"nested 10000", deep(10000, `[`, ``, `]`)},
		{"nested 10000 spaced", deep(10000, `[ `, ``, ` ]`)},
		{"100 KB", large(100 << 10)}, // a store's cache of large records holds it
		{"1 MB", large(1 << 20)},     // too large for that cache
	}
}

// testHostileResults: every result, committed on the store, comes back byte for byte in the
// commit's cert, in a replay by another engine (which reads the record from the store), in
// the record's cert, in the ledger's export and once the record is moved aside (superseded,
// written again as it was read); every such cert verifies, hashes as the
// memory store's does, and its public JSON carries the exact bytes in result_bytes.
func testHostileResults(t *testing.T, newStore Factory) {
	st := newStore(t)
	eng := fence.New(st, fence.Config{})
	ref := fence.New(fence.NewMemoryStore(), fence.Config{})
	cases := HostileResults()
	want := map[string][]byte{} // by intent
	hashes := map[string]string{}
	reqs := make([]fence.Request, len(cases))
	for i, tc := range cases {
		r := fence.Request{Intent: fmt.Sprintf("hostile:%02d", i), Tool: "t", Args: []byte(`{"case":` + fmt.Sprint(i) + `}`), Agent: "agent-a"}
		reqs[i] = r
		exact := tc.Result
		if len(exact) == 0 {
			exact = []byte("null")
		}
		want[r.Intent] = exact
		rc := mustCommit(t, ref, mustFresh(t, ref, r), string(tc.Result))
		hashes[r.Intent] = rc.Hash
		c, err := eng.Commit(ctx, mustFresh(t, eng, r), tc.Result)
		if err != nil {
			t.Errorf("%s: commit: %v", tc.Name, err)
			continue
		}
		checkExact(t, tc.Name+": committed cert", c, exact, rc.Hash)
	}
	// Another engine on the same store has nothing of the first's in memory.
	eng2 := fence.New(st, fence.Config{})
	for i, tc := range cases {
		r := reqs[i]
		adm, err := eng2.Prepare(ctx, r)
		if err != nil || adm.Fresh() {
			t.Errorf("%s: replay: %+v %v", tc.Name, adm, err)
			continue
		}
		checkExact(t, tc.Name+": replayed cert", adm.Cert, want[r.Intent], hashes[r.Intent])
		if len(tc.Result) <= 64<<10 { // the public form of a megabyte costs a second under -race
			checkPublic(t, tc.Name+": replayed cert", adm.Cert, want[r.Intent])
		}
		rec, err := eng2.Status(ctx, r.Intent)
		if err != nil || rec.Cert == nil {
			t.Errorf("%s: status: %+v %v", tc.Name, rec, err)
			continue
		}
		checkExact(t, tc.Name+": recorded cert", rec.Cert, want[r.Intent], hashes[r.Intent])
	}
	var out bytes.Buffer
	if _, err := ledger.Export(ctx, st, &out); err != nil {
		t.Fatalf("export: %v", err) // the one JSON a store's whole ledger is read out as
	}
	seen := 0
	for _, line := range bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n")) {
		var l struct {
			Record *fence.Record `json:"record"`
		}
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("export line %.200s...: %v", line, err)
		}
		if l.Record == nil || l.Record.Cert == nil {
			continue
		}
		exact, ok := want[l.Record.Intent]
		if !ok {
			continue
		}
		seen++
		what := l.Record.Intent + ": exported cert"
		checkExact(t, what, l.Record.Cert, exact, hashes[l.Record.Intent])
		if !bytes.Contains(line, resultBytes(exact)) {
			t.Errorf("%s: the line has no result_bytes of the exact result", what)
		}
	}
	if t.Failed() {
		return
	}
	if seen != len(cases) {
		t.Fatalf("export holds %d of the %d records", seen, len(cases))
	}
	// Past its replay window, each call is a new action: the engine moves the done record
	// aside, writing again the record it read (and decoded) from the store.
	time.Sleep(5 * time.Millisecond)
	for i, tc := range cases {
		if len(tc.Result) > 64<<10 {
			continue // as the 100 KB result, at a second's cost under -race
		}
		r := reqs[i]
		r.ReplayWindow = time.Millisecond
		mustFresh(t, eng2, r)
		moved := fence.SupersededIntent(r.Intent, hashes[r.Intent])
		rec, err := eng.Status(ctx, moved)
		if err != nil || rec.Cert == nil {
			t.Errorf("%s: %s holds %+v (%v); want the done record moved aside", tc.Name, moved, rec, err)
			continue
		}
		checkExact(t, tc.Name+": moved cert", rec.Cert, want[r.Intent], hashes[r.Intent])
	}
}

// checkExact checks that c holds exactly the result exact, verifies with the hash hash, and
// that its public JSON gives both back.
func checkExact(t *testing.T, what string, c *fence.Cert, exact []byte, hash string) {
	t.Helper()
	if !bytes.Equal(c.Result, exact) {
		t.Errorf("%s: result %.200q, want %.200q", what, c.Result, exact)
		return
	}
	if c.ResultSHA256 != canon.Sum(exact) || c.Hash != hash {
		t.Errorf("%s: result_sha256 %s hash %s; want %s %s", what, c.ResultSHA256, c.Hash, canon.Sum(exact), hash)
		return
	}
	if err := c.Verify(); err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if h, err := c.ComputeHash(); err != nil || h != c.Hash {
		t.Errorf("%s: hash %s, its body hashes to %s (%v)", what, c.Hash, h, err)
		return
	}
}

// checkPublic checks that the public JSON of c carries exact in result_bytes, and reads back
// as a cert that holds it.
func checkPublic(t *testing.T, what string, c *fence.Cert, exact []byte) {
	t.Helper()
	pub, err := json.Marshal(c)
	if err != nil {
		t.Errorf("%s: marshal: %v", what, err)
		return
	}
	if !bytes.Contains(pub, resultBytes(exact)) {
		t.Errorf("%s: public JSON %.300s has no result_bytes of the exact result", what, pub)
	}
	var back fence.Cert
	if err := json.Unmarshal(pub, &back); err != nil || !bytes.Equal(back.Result, exact) || back.Hash != c.Hash || back.Verify() != nil {
		t.Errorf("%s: public JSON reads back as %.200q %s (%v)", what, back.Result, back.Hash, err)
	}
}

// resultBytes is the result_bytes member that carries exact.
func resultBytes(exact []byte) []byte {
	return []byte(`"result_bytes":"` + base64.StdEncoding.EncodeToString(exact) + `"`)
}

// testDeepArgs: arguments nested fence.MaxNesting levels are admitted, and their done record
// replays from the store; one level more is refused before anything runs. (Arguments nested
// 9,999 levels were admitted, and the done record holding them, in its cert two levels down,
// no longer decoded: the intent's effect had run, and the store could not say so.)
func testDeepArgs(t *testing.T, newStore Factory) {
	st := newStore(t)
	eng := fence.New(st, fence.Config{})
	deep := func(n int) []byte {
		return []byte(`{"a":` + strings.Repeat("[", n-1) + strings.Repeat("]", n-1) + "}")
	}
	r := fence.Request{Intent: "deep:args", Tool: "t", Args: deep(fence.MaxNesting), Agent: "agent-a"}
	c := mustCommit(t, eng, mustFresh(t, eng, r), `1`)
	adm, err := fence.New(st, fence.Config{}).Prepare(ctx, r)
	if err != nil || adm.Fresh() || adm.Cert.Hash != c.Hash || !bytes.Equal(adm.Cert.Args, r.Args) {
		t.Fatalf("replay of args nested %d levels: %v", fence.MaxNesting, err)
	}
	for _, n := range []int{fence.MaxNesting + 1, 9999, 10000} {
		r := fence.Request{Intent: fmt.Sprintf("deep:args:%d", n), Tool: "t", Args: deep(n), Agent: "agent-a"}
		adm, err := eng.Prepare(ctx, r)
		if errors.Is(err, fence.ErrInvalid) {
			continue
		}
		if err != nil || adm.Ticket == nil {
			t.Fatalf("args nested %d levels: %+v %v; want invalid_request", n, adm, err)
		}
		_, cerr := eng.Commit(ctx, *adm.Ticket, []byte(`1`))
		_, rerr := fence.New(st, fence.Config{}).Prepare(ctx, r)
		t.Errorf("args nested %d levels were admitted, want invalid_request; then commit: %v; replay: %.300v", n, cerr, rerr)
	}
}
