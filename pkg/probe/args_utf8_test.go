package probe

import (
	"strings"
	"testing"
)

// TestParseArgsRefusesInvalidUTF8: --args that is not UTF-8 is refused before anything is
// called. It was sent as given: the server read each bad byte as U+FFFD, and the report
// showed "\ufffd" for arguments the user never wrote (SPEC §7: exactly the given arguments).
func TestParseArgsRefusesInvalidUTF8(t *testing.T) {
	for _, in := range []string{"{\"a\":\"\xff\"}", "{\"\xc3\":1}", "{\"a\":\"\xed\xa0\x80\"}"} {
		if _, err := ParseArgs(in); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
			t.Errorf("ParseArgs(%q) = %v, want a refusal saying it is not valid UTF-8", in, err)
		}
	}
	if _, err := ParseArgs(`{"a":"\u00ff é"}`); err != nil {
		t.Errorf("valid UTF-8 and \\u escapes refused: %v", err)
	}
}
