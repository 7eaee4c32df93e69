package jsonrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// scanInPieces runs idScan over line cut at random places.
func scanInPieces(line []byte, rng *rand.Rand) []byte {
	var s idScan
	for len(line) > 0 {
		n := 1 + rng.IntN(len(line))
		s.feed(line[:n])
		line = line[n:]
	}
	return s.result()
}

// idScan never names an id AnswerID would not in a valid line (it may give up where AnswerID
// reads on), and
// finds the id of the responses servers write, wherever the id is.
func TestIDScanAgreesWithAnswerID(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	found := []string{
		`{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"x"}]}}`,
		`{"result":{"content":[{"type":"text","text":"\"id\":9,"}],"id":3},"jsonrpc":"2.0","id":7}`,
		` {"error":{"code":-1,"message":"m","data":{"id":1}},"id":"s\"7","jsonrpc":"2.0"}`,
		`{"id" : -1.5e3 , "result":[{"id":2}]}`,
		`{"result":"method","id":"a b"}`,
	}
	for _, l := range found {
		want := AnswerID([]byte(l))
		for range 50 {
			if got := scanInPieces([]byte(l), rng); want == nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: scanned %s, AnswerID %s", l, got, want)
			}
		}
	}
	none := []string{
		`{"jsonrpc":"2.0","id":7,"method":"roots/list"}`, // a request: its id is the sender's
		`{"id":1,"id":2,"result":1}`,
		`{"i\u0064":1,"result":1}`, // an escape in a member name: gives up
		`{"id":null,"result":1}`,
		`{"id":{"x":1},"result":1}`,
		`[{"id":1}]`,
		`{"result":{"id":1}}`,
		`{"id":"` + strings.Repeat("x", maxScannedID) + `"}`,
		`{"methodx":1,"id":4,"meth":2,"result":1}`, // not "method": the id stands
	}
	for i, l := range none {
		got := scanInPieces([]byte(l), rng)
		if i == len(none)-1 {
			if string(got) != "4" {
				t.Fatalf("%s: scanned %s, want 4", l, got)
			}
			continue
		}
		if got != nil {
			t.Fatalf("%s: scanned %s, want none", l, got)
		}
	}
}

func FuzzIDScan(f *testing.F) {
	for _, s := range []string{`{"id":1,"result":2}`, `{"result":{"a":[1,"}"]},"id":"x"}`, `{"method":"m","id":1}`} {
		f.Add([]byte(s), uint64(1))
	}
	f.Fuzz(func(t *testing.T, line []byte, seed uint64) {
		got := scanInPieces(line, rand.New(rand.NewPCG(seed, 0)))
		if got != nil && json.Valid(line) && !bytes.Equal(got, AnswerID(line)) {
			t.Fatalf("%q: scanned %s, AnswerID %s", line, got, AnswerID(line))
		}
	})
}

// A line longer than the Reader's limit is skipped without being held, and the id it answers
// is told; the next line is read as usual.
func TestReaderTellsTheSkippedLinesID(t *testing.T) {
	big := `{"result":{"content":[{"type":"text","text":"` + strings.Repeat("y", 1<<20) + `"}]},"jsonrpc":"2.0","id":42}` + "\n"
	r := NewReader(strings.NewReader(big+`{"jsonrpc":"2.0","id":43,"result":{}}`+"\n"), 64<<10)
	if _, err := r.ReadLine(); !errors.Is(err, ErrTooLong) || string(r.SkippedID()) != "42" {
		t.Fatalf("the long line: %v, id %s", err, r.SkippedID())
	}
	if line, err := r.ReadLine(); err != nil || !strings.Contains(string(line), `"id":43`) {
		t.Fatalf("the next line: %s, %v", line, err)
	}
}

// A skipped request's id is read as it goes by (what its refusal answers); a response's is
// not a request's, and an id that is not valid JSON, or that cannot be read for sure, is none.
func TestReaderTellsTheSkippedRequestsID(t *testing.T) {
	pad := strings.Repeat("z", 70<<10)
	cases := []struct{ line, request, answer string }{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"arguments":{"a":"` + pad + `"}}}`, `7`, ``},
		{`{"method":"tools/call","params":{"a":"` + pad + `","id":1},"id":"r\"1"}`, `"r\"1"`, ``},
		{`{"jsonrpc":"2.0","id":8,"result":{"text":"` + pad + `"}}`, ``, `8`},
		{`{"method":"m","params":"` + pad + `"}`, ``, ``},                                   // a notification
		{`{"method":"m","id":"\x","params":"` + pad + `"}`, ``, ``},                         // not JSON
		{`{"method":"m","id":1e,"params":"` + pad + `"}`, ``, ``},                           // not JSON
		{`{"method":"m","id":null,"params":"` + pad + `"}`, ``, ``},                         // no readable id
		{`{"method":"m","id":1,"id":2,"params":"` + pad + `"}`, ``, ``},                     // two
		{`{"m\u0065thod":"m","id":1,"params":"` + pad + `"}`, ``, ``},                       // an escaped name
		{`{"method":"m","id":` + strings.Repeat("1", 2000) + `,"p":"` + pad + `"}`, ``, ``}, // too long
	}
	for _, c := range cases {
		r := NewReader(strings.NewReader(c.line+"\n"+`{"jsonrpc":"2.0","id":9,"method":"ping"}`+"\n"), 64<<10)
		if _, err := r.ReadLine(); !errors.Is(err, ErrTooLong) || string(r.SkippedRequestID()) != c.request || string(r.SkippedID()) != c.answer {
			t.Fatalf("%.60s…: %v, request id %q (want %q), answer id %q (want %q)", c.line, err, r.SkippedRequestID(), c.request, r.SkippedID(), c.answer)
		}
		if line, err := r.ReadLine(); err != nil || !strings.Contains(string(line), `"id":9`) {
			t.Fatalf("the next line: %s, %v", line, err)
		}
	}
}
