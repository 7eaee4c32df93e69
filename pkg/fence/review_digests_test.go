package fence

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestCertDigestStringsStayPut: the digests of a recorded cert (strings pointing into the
// cert's own object) keep their bytes for as long as anyone holds them: after the record and
// its cert are dropped and collected, after the cert is copied or decoded over, and while new
// certs are made (nothing reuses or rewrites the bytes).
func TestCertDigestStringsStayPut(t *testing.T) {
	ctx := context.Background()
	type held struct{ hash, sum, hashCopy, sumCopy string }
	var keep []held
	for round := range 4 {
		e := New(NewMemoryStore(), Config{})
		for i := range 200 {
			intent := fmt.Sprintf("dig:%d:%d", round, i)
			adm, err := e.Prepare(ctx, Request{Intent: intent, Tool: "t", Args: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
			if err != nil || !adm.Fresh() {
				t.Fatal(adm, err)
			}
			c, err := e.Commit(ctx, *adm.Ticket, json.RawMessage(fmt.Sprintf(`{"r":%d}`, i)))
			if err != nil {
				t.Fatal(err)
			}
			rec, err := e.Status(ctx, intent)
			if err != nil || rec.Cert == nil {
				t.Fatal(rec, err)
			}
			recorded := rec.Cert
			h := held{recorded.Hash, recorded.ResultSHA256, strings.Clone(recorded.Hash), strings.Clone(recorded.ResultSHA256)}
			if i%2 == 0 {
				// Decoding over the recorded cert replaces its strings, never their bytes.
				other, _ := json.Marshal(c)
				var alt Cert
				_ = json.Unmarshal(other, &alt)
				alt.Hash, alt.ResultSHA256 = strings.Repeat("0", len(alt.Hash)), strings.Repeat("1", len(alt.ResultSHA256))
				b, _ := json.Marshal(&alt)
				if err := json.Unmarshal(b, recorded); err != nil {
					t.Fatal(err)
				}
				cp := *c
				*c = Cert{}
				_ = cp
			}
			keep = append(keep, h)
		}
		runtime.GC()
	}
	for range 3 {
		junk := make([][]byte, 0, 1<<12)
		for range 1 << 12 {
			junk = append(junk, []byte(strings.Repeat("f", 128)))
		}
		runtime.GC()
		_ = junk
	}
	for i, h := range keep {
		if h.hash != h.hashCopy || h.sum != h.sumCopy || len(h.hash) != 64 || len(h.sum) != 64 {
			t.Fatalf("cert %d: digests now %q %q; were %q %q", i, h.hash, h.sum, h.hashCopy, h.sumCopy)
		}
	}
}
