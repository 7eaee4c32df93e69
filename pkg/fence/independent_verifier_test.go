package fence_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// docValue is a JSON value as docs/CERTS.md's recipe reads it: objects keep their members in
// a map (a member given twice is an error outside result), numbers their exact text.
type docValue any

// docParse reads one JSON text; twiceOK allows members given twice (the last counts).
func docParse(text []byte, twiceOK bool) (docValue, error) {
	d := json.NewDecoder(bytes.NewReader(text))
	d.UseNumber()
	v, err := docParseValue(d, twiceOK, 0)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err == nil {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

func docParseValue(d *json.Decoder, twiceOK bool, depth int) (docValue, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			m := map[string]docValue{}
			for d.More() {
				k, err := d.Token()
				if err != nil {
					return nil, err
				}
				name := k.(string)
				// Within a cert's result (depth 1 below the cert), a member may come twice.
				ok := twiceOK || (depth == 0 && name == "result")
				v, err := docParseValue(d, ok, depth+1)
				if err != nil {
					return nil, err
				}
				if _, seen := m[name]; seen && !twiceOK {
					return nil, fmt.Errorf("member %q given twice", name)
				}
				m[name] = v
			}
			_, err := d.Token()
			return m, err
		case '[':
			var a []docValue
			for d.More() {
				v, err := docParseValue(d, twiceOK, depth+1)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := d.Token()
			return append([]docValue{}, a...), err
		}
	}
	return tok, nil
}

// docNumber writes a number's exact decimal value in the layout of ECMAScript's
// Number.prototype.toString (step 3).
func docNumber(n json.Number) string {
	sign, s := "", strings.ToLower(string(n))
	if strings.HasPrefix(s, "-") {
		sign = "-"
	}
	// digits × 10^exp with digits free of leading and trailing zeros.
	mant, exp := strings.TrimPrefix(s, "-"), 0
	if i := strings.IndexByte(mant, 'e'); i >= 0 {
		exp, _ = strconv.Atoi(mant[i+1:])
		mant = mant[:i]
	}
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		exp -= len(mant) - i - 1
		mant = mant[:i] + mant[i+1:]
	}
	mant = strings.TrimLeft(mant, "0")
	if mant == "" {
		return "0"
	}
	for strings.HasSuffix(mant, "0") {
		mant, exp = mant[:len(mant)-1], exp+1
	}
	k, e := len(mant), len(mant)+exp
	switch {
	case k <= e && e <= 21:
		return sign + mant + strings.Repeat("0", e-k)
	case 0 < e && e <= 21:
		return sign + mant[:e] + "." + mant[e:]
	case -6 < e && e <= 0:
		return sign + "0." + strings.Repeat("0", -e) + mant
	}
	out := sign + mant[:1]
	if k > 1 {
		out += "." + mant[1:]
	}
	if e-1 >= 0 {
		return out + "e+" + strconv.Itoa(e-1)
	}
	return out + "e" + strconv.Itoa(e-1)
}

// docString writes a string as RFC 8785 does.
func docString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

func docCanonical(v docValue) string {
	switch x := v.(type) {
	case map[string]docValue:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int {
			return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
		})
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = docString(k) + ":" + docCanonical(x[k])
		}
		return "{" + strings.Join(parts, ",") + "}"
	case []docValue:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = docCanonical(e)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case string:
		return docString(x)
	case json.Number:
		return docNumber(x)
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return "null"
	}
	panic(fmt.Sprintf("value %T", v))
}

var docNotKept = regexp.MustCompile(`^\{"effectfence/result_not_kept":\{"sha256":"[0-9a-f]{64}"\}\}$`)

// docVerify applies docs/CERTS.md's recipe to a cert's JSON, written from the page alone.
func docVerify(text []byte) bool {
	v, err := docParse(text, false)
	if err != nil {
		return false
	}
	cert, ok := v.(map[string]docValue)
	if !ok {
		return false
	}
	want, ok := cert["hash"].(string)
	if !ok {
		return false
	}
	delete(cert, "hash")
	if sum, ok := cert["result_sha256"].(string); ok {
		enc, _ := cert["result_bytes"].(string)
		exact, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return false
		}
		if !docNotKept.Match(exact) {
			h := sha256.Sum256(exact)
			if hex.EncodeToString(h[:]) != sum {
				return false
			}
		}
		if kept := cert["result"]; kept != nil {
			value, err := docParse(exact, true)
			if err != nil || docCanonical(kept) != docCanonical(value) {
				return false
			}
			// encoding/json reads every lone surrogate escape as U+FFFD, which the recipe's
			// strings (Python's) tell apart: those escapes are compared as written.
			if !slices.Equal(docSurrogates(jsonrpc.MemberValue(text, "result")), docSurrogates(exact)) {
				return false
			}
		}
		delete(cert, "result")
		delete(cert, "result_bytes")
	}
	h := sha256.Sum256([]byte(docCanonical(cert)))
	return hex.EncodeToString(h[:]) == want
}

// docSurrogates lists the escapes \uD800 to \uDFFF of the JSON text b, as written.
func docSurrogates(b []byte) []string {
	var out []string
	for _, m := range regexp.MustCompile(`\\(?:u[dD][89a-fA-F][0-9a-fA-F]{2}|.)`).FindAll(b, -1) {
		if len(m) == 6 {
			out = append(out, strings.ToLower(string(m)))
		}
	}
	return out
}

// goVerify is what fence.Cert says of the same JSON.
func goVerify(text []byte) bool {
	var c fence.Cert
	return json.Unmarshal(text, &c) == nil && c.Verify() == nil
}

// A verifier written from docs/CERTS.md alone, in Go, agrees with fence.Cert on every cert the
// engine records (hostile names, numbers beyond double precision, big clock counters, kept and
// hash-only results, results without a canonical form) and on every edit of one (a byte
// changed, a name in another case, a member given twice, white space, an escape, a number
// respelled): both accept it, or both refuse it. Where they differ by design, the edit is
// counted apart: a number of seq, a read set or a clock spelled otherwise (1.0 for 1), which
// the recipe takes and fence.Cert does not decode (it fails closed); a member left out, which
// fence.Cert reads as its zero value. EFFECTFENCE_TEST_CERT_SEED picks another set of certs and edits.
func TestIndependentVerifierAgreesWithCert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	seed := uint64(11)
	if s, err := strconv.ParseUint(os.Getenv("EFFECTFENCE_TEST_CERT_SEED"), 10, 64); err == nil {
		seed = s
	}
	r := rand.New(rand.NewPCG(seed, 12))
	names := []string{"a", "é", "\U0001F600", "\ue000", "\u2028", `x"y\z`, "\t\n\x01\x7f", "", "ﬁ", "日本", "<&>"}
	nums := []string{"0", "-0", "1e400", "-1.5e-7", "123456789012345678901234567890", "0.1", "1E21", "1e-6", "1e-7", "9007199254740993", "5e-324", "100", "12.50"}
	pick := func(xs []string) string { return xs[r.IntN(len(xs))] }
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	var certs [][]byte
	for i := range 40 {
		clock := fence.VectorClock{}
		for j := range r.IntN(4) {
			clock[pick(names)+strconv.Itoa(j)] = r.Uint64() >> r.IntN(64)
		}
		agent := pick(names)
		delete(clock, agent)
		args := fmt.Sprintf(`{%s:%s,%s:[%s,%s],"n":{%s:%s}}`, q(pick(names)), pick(nums), q(pick(names)+"2"), pick(nums), q(pick(names)), q(pick(names)), pick(nums))
		req := fence.Request{Intent: fmt.Sprint("i", i, pick(names)), Tool: pick(names), Args: json.RawMessage(args), Agent: agent, Clock: clock, Domain: pick(names) + "d"}
		if i%3 == 0 {
			req.KeepResult = fence.KeepHash
		}
		if i%4 == 1 {
			seq, err := eng.Current(ctx, req.Domain)
			if err != nil {
				t.Fatal(err)
			}
			req.ReadSet = []fence.ReadSetEntry{{Domain: req.Domain, Seq: seq}}
		}
		adm, err := eng.Prepare(ctx, req)
		if err != nil {
			t.Fatalf("prepare %s: %v", args, err)
		}
		result := fmt.Sprintf(`{"r": %s, %s:%s}`, pick(nums), q(pick(names)), q(pick(names)))
		if i%5 == 2 {
			result = `{"k":1,"k":2,"s":"cut \ud83d"}` // no canonical form: kept as it came
		}
		c, err := eng.Commit(ctx, *adm.Ticket, []byte(result))
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, b)
	}
	integer := regexp.MustCompile(`[:,\[][0-9]+[,}\]]`)
	edits, respelledNumbers, leftOut := 0, 0, 0
	for _, b := range certs {
		if !docVerify(b) || !goVerify(b) {
			t.Fatalf("a recorded cert: doc %v, fence.Cert %v\n%s", docVerify(b), goVerify(b), b)
		}
		for range 300 {
			m := bytes.Clone(b)
			switch r.IntN(6) {
			case 0: // one byte changed
				const alphabet = `{}[]",:0123456789aeE.-\ ABINT`
				m[r.IntN(len(m))] = alphabet[r.IntN(len(alphabet))]
			case 1: // a member name in another case
				i := bytes.Index(m, []byte(`"`+[]string{"intent", "tool", "agent", "args", "result", "hash", "seq", "domain"}[r.IntN(8)]+`":`))
				if i < 0 {
					continue
				}
				m[i+1] -= 'a' - 'A'
			case 2: // a member given again, before the first
				name := []string{"intent", "tool", "agent", "parent", "domain"}[r.IntN(5)]
				m = bytes.Replace(m, []byte(`{"intent":`), []byte(`{"`+name+`":"edited","intent":`), 1)
			case 3: // white space after a comma or colon (the same cert)
				i := r.IntN(len(m))
				if j := bytes.IndexAny(m[i:], ",:"); j >= 0 {
					m = slices.Insert(m, i+j+1, []byte(" \n\t")[r.IntN(3)])
				}
			case 4: // a letter of a string escaped (the same cert, unless it was in result_bytes)
				i := r.IntN(len(m))
				if j := bytes.IndexAny(m[i:], "abcdfn"); j >= 0 {
					m = slices.Concat(m[:i+j], []byte(fmt.Sprintf(`\u%04x`, m[i+j])), m[i+j+1:])
				}
			case 5: // a number respelled (the same value): 1 as 1.0, 1e400 as 10e399
				i := r.IntN(len(m))
				if loc := integer.FindIndex(m[i:]); loc != nil {
					end := i + loc[1] - 1
					m = slices.Insert(m, end, []byte(".0")...)
				}
			}
			doc, goes := docVerify(m), goVerify(m)
			if doc == goes {
				edits++
				continue
			}
			// Where they may differ by design.
			var c fence.Cert
			if err := json.Unmarshal(m, &c); !goes && err != nil && strings.Contains(err.Error(), "cannot unmarshal number") {
				respelledNumbers++
				continue
			}
			if missing(m) {
				leftOut++
				continue
			}
			t.Fatalf("docs/CERTS.md's recipe says %v, fence.Cert %v, of\n%s\n(from %s)", doc, goes, m, b)
		}
	}
	t.Logf("%d edits judged alike; apart by design: %d with a number of seq, a read set or a clock respelled, %d with a member left out", edits, respelledNumbers, leftOut)
}

// missing says whether a cert member is missing from m (an edit turned its name into another).
func missing(m []byte) bool {
	var v map[string]json.RawMessage
	if json.Unmarshal(m, &v) != nil {
		return false
	}
	for _, k := range []string{"intent", "parent", "domain", "seq", "tool", "args", "vector_clock", "read_set", "agent", "hash"} {
		if _, ok := v[k]; !ok {
			return true
		}
	}
	return false
}
