package canon

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

func TestJSONCanonicalForms(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{` { "a" : [ 1 , 2.0 , 1e2 ] } `, `{"a":[1,2,100]}`},
		{`"\u00e9\u2028<>&"`, "\"\u00e9\u2028<>&\""},
		{`null`, `null`},
		{`{"\u20ac":1,"\r":2}`, "{\"\\r\":2,\"\u20ac\":1}"},
	}
	for _, c := range cases {
		got, err := JSON([]byte(c.in))
		if err != nil {
			t.Fatalf("JSON(%s): %v", c.in, err)
		}
		if string(got) != c.want {
			t.Errorf("JSON(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestJSONRejectsBadInput(t *testing.T) {
	for _, in := range []string{``, `{`, `{"a":1} x`, `{'a':1}`, `[1,]`, `nul`} {
		if _, err := JSON([]byte(in)); err == nil {
			t.Errorf("JSON(%q) accepted invalid input", in)
		}
	}
	huge := make([]byte, MaxInput+1)
	if _, err := JSON(huge); err == nil || !strings.Contains(err.Error(), "exceeds") {
		t.Errorf("oversized input: err = %v", err)
	}
}

func TestFingerprintIgnoresSpellingNotValue(t *testing.T) {
	a, err := Fingerprint("charge", []byte(`{"amount":4900,"to":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Fingerprint("charge", []byte(` {"to" : "x", "amount": 4.9e3}`))
	if a != b {
		t.Fatalf("same call, different fingerprints: %s %s", a, b)
	}
	c, _ := Fingerprint("charge", []byte(`{"amount":4901,"to":"x"}`))
	d, _ := Fingerprint("refund", []byte(`{"amount":4900,"to":"x"}`))
	if c == a || d == a {
		t.Fatal("different calls share a fingerprint")
	}
	e, _ := Fingerprint("t", nil)
	f, _ := Fingerprint("t", []byte("null"))
	if e != f {
		t.Fatal("absent args should equal null args")
	}
}

// The documented vector: docs/CERTS.md quotes it, so another language can check its JCS.
func TestFingerprintVector(t *testing.T) {
	c, err := ToolCall("charge_card", []byte(`{"amount":4900}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(c) != `{"args":{"amount":4900},"tool":"charge_card"}` {
		t.Fatalf("canonical tool call = %s", c)
	}
	// sha256sum of the line above, computed outside Go.
	if got, want := Sum(c), "0e5afa24d7a63a1fb239d65b51afdb7e2b9fc8c598eaffa2afcde77925593cdb"; got != want {
		t.Fatalf("digest = %s, want %s", got, want)
	}
}

func FuzzJSON(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,2.5e10,"x",null,true]`, `{"b":{"c":[{}]},"a":"\u0000"}`, `-0`, `1e400`, `"\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := JSON(in)
		if all, aerr := canonicalWith(in, 0); len(in) > 0 && len(in) <= MaxInput && ((aerr == nil) != (err == nil) || !bytes.Equal(all, out)) {
			t.Fatalf("every object deferred: %q (%v), else %q (%v)", all, aerr, out, err)
		}
		if err != nil {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("canonical output is not JSON: %q", out)
		}
		again, err := JSON(out)
		if err != nil {
			t.Fatalf("canonical output rejected: %q: %v", out, err)
		}
		if string(again) != string(out) {
			t.Fatalf("not idempotent: %q -> %q", out, again)
		}
	})
}

func FuzzFingerprint(f *testing.F) {
	f.Add("charge", []byte(`{"amount":4900}`))
	f.Add("", []byte(`null`))
	f.Add("t\u2028", []byte(`{"k":[1,{"z":0,"a":-1.5}]}`))
	f.Fuzz(func(t *testing.T, tool string, args []byte) {
		fp, err := Fingerprint(tool, args)
		if err != nil {
			return
		}
		if len(args) == 0 {
			args = []byte("null") // absent arguments are null
		}
		// Re-spelling the arguments through encoding/json must not change identity.
		var v any
		d := json.NewDecoder(bytes.NewReader(args))
		d.UseNumber() // numbers keep their exact spelling
		if err := d.Decode(&v); err != nil {
			t.Fatalf("fingerprinted args that encoding/json rejects: %q", args)
		}
		re, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return
		}
		// The assembled object must be exactly what the library makes of the naive one.
		name, _ := json.Marshal(tool)
		naive, err := JSON([]byte(`{"tool":` + string(name) + `,"args":` + string(args) + `}`))
		if err != nil {
			t.Fatalf("naive object rejected: %v", err)
		}
		if Sum(naive) != fp {
			t.Fatalf("assembled tool call differs from JCS: tool %q args %q", tool, args)
		}
		fp2, err := Fingerprint(tool, re)
		if err != nil {
			t.Fatalf("re-spelled args rejected: %v", err)
		}
		if fp != fp2 {
			// Decoded with UseNumber, every value is kept exactly.
			t.Fatalf("fingerprint changed with spelling: %q vs %q", args, re)
		}
	})
}

// TestSumHex checks Sum's hex digits against encoding/hex over enough digests that every
// byte value occurs.
func TestSumHex(t *testing.T) {
	for i := range 1000 {
		in := []byte(strconv.Itoa(i))
		s := sha256.Sum256(in)
		if got, want := Sum(in), hex.EncodeToString(s[:]); got != want {
			t.Fatalf("Sum(%q) = %s, want %s", in, got, want)
		}
	}
}
