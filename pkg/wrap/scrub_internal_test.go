package wrap

import (
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/hide"
)

// TestRedactedTextsAndScrub: the texts taken out of a recorded reason are every leaf at or
// under a redacted path (strings as they are and JSON-escaped, numbers, booleans) and the
// names of the members of an object there (the record keeps none of them), and nothing else.
func TestRedactedTextsAndScrub(t *testing.T) {
	p := &Proxy{opt: Options{Redact: map[string][]string{"pay": {"card", "items.*.code", "missing.path"}}}}
	params := []byte(`{"name":"pay","arguments":{"card":{"number":"4111111111111111","cvv":123,"ok":true},"items":[{"code":"a\"b"},{"code":"x/y"}],"note":"public"}}`)
	texts := p.redactedTexts("pay", params)
	for _, want := range []string{"4111111111111111", "123", "true", `a"b`, `a\"b`, "x/y", "number", "cvv", "ok"} {
		if !slices.Contains(texts, want) {
			t.Errorf("texts %q lack %q", texts, want)
		}
	}
	if slices.Contains(texts, "public") || slices.Contains(texts, "code") || slices.Contains(texts, "note") {
		t.Errorf("a field not redacted is among the texts: %q", texts)
	}
	if got := p.redactedTexts("other", params); got != nil {
		t.Errorf("a tool without redaction has texts %q", got)
	}
	reason := `dying on {"arguments":{"card":{"number":"4111111111111111","cvv":123},"items":[{"code":"a\"b"}],"note":"public"}}`
	want := `dying on {"arguments":{"card":{"[redacted]":"[redacted]","[redacted]":[redacted]},"items":[{"code":"[redacted]"}],"note":"public"}}`
	if got := scrub(reason, texts); got != want {
		t.Errorf("scrub\n got %s\nwant %s", got, want)
	}
}

// TestRedactedTextsAsEncodersEscapeThem: a server that echoes a redacted string through its
// own JSON encoder writes it escaped its encoder's way: Python's json.dumps escapes every
// character beyond ASCII ("Jos\u00e9", a surrogate pair beyond the BMP), PHP's json_encode
// also "/", Go's json.Marshal "<", ">" and "&". Each of these spellings is taken out.
func TestRedactedTextsAsEncodersEscapeThem(t *testing.T) {
	p := &Proxy{opt: Options{Redact: map[string][]string{"pay": {"holder"}}}}
	texts := p.redactedTexts("pay", []byte(`{"name":"pay","arguments":{"holder":"José <A&B> a/b 😀"}}`))
	for _, echoed := range []string{
		`{"holder": "Jos\u00e9 <A&B> a/b \ud83d\ude00"}`, // Python
		`{"holder":"Jos\u00e9 <A&B> a\/b \ud83d\ude00"}`, // PHP
		`{"holder":"José \u003cA\u0026B\u003e a/b 😀"}`,   // Go's json.Marshal
	} {
		if got := scrub(echoed, texts); strings.Contains(got, "Jos") || !strings.Contains(got, "[redacted]") {
			t.Errorf("scrub(%s) = %s; want the value taken out", echoed, got)
		}
	}
}

// TestHiddenIsRedacted: what mcpstdio shows in place of a hidden value in a child's stderr is
// the engine's word for a redacted value.
func TestHiddenIsRedacted(t *testing.T) {
	if hide.Redacted != fence.Redacted {
		t.Fatalf("hide.Redacted %q, fence.Redacted %q", hide.Redacted, fence.Redacted)
	}
}
