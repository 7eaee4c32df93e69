package wrap

import (
	"slices"
	"testing"
)

// TestRedactedTextsAndScrub: the texts taken out of a recorded reason are every leaf at or
// under a redacted path (strings as they are and JSON-escaped, numbers, booleans), and nothing
// else.
func TestRedactedTextsAndScrub(t *testing.T) {
	p := &Proxy{opt: Options{Redact: map[string][]string{"pay": {"card", "items.*.code", "missing.path"}}}}
	params := []byte(`{"name":"pay","arguments":{"card":{"number":"4111111111111111","cvv":123,"ok":true},"items":[{"code":"a\"b"},{"code":"x/y"}],"note":"public"}}`)
	texts := p.redactedTexts("pay", params)
	for _, want := range []string{"4111111111111111", "123", "true", `a"b`, `a\"b`, "x/y"} {
		if !slices.Contains(texts, want) {
			t.Errorf("texts %q lack %q", texts, want)
		}
	}
	if slices.Contains(texts, "public") {
		t.Errorf("a field not redacted is among the texts: %q", texts)
	}
	if got := p.redactedTexts("other", params); got != nil {
		t.Errorf("a tool without redaction has texts %q", got)
	}
	reason := `dying on {"arguments":{"card":{"number":"4111111111111111","cvv":123},"items":[{"code":"a\"b"}],"note":"public"}}`
	want := `dying on {"arguments":{"card":{"number":"[redacted]","cvv":[redacted]},"items":[{"code":"[redacted]"}],"note":"public"}}`
	if got := scrub(reason, texts); got != want {
		t.Errorf("scrub\n got %s\nwant %s", got, want)
	}
}
