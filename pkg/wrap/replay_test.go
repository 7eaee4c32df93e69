package wrap

import (
	"encoding/json"
	"github.com/effectfence/effectfence/pkg/canon"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// spliced matches exactly what replay adds, so a test can take it out again.
var spliced = regexp.MustCompile(`"effectfence/replayed":true,"effectfence/intent":"(?:[^"\\]|\\.)*","effectfence/cert":"[0-9a-f]*","effectfence/recorded_at":"[^"]*",?` +
	`|,?\{"type":"text","text":"effectfence: this is the recorded result(?:[^"\\]|\\.)*","_meta":\{"effectfence/note":true\}\}`)

// Unspliced removes replay's additions; for results with _meta and content it gives back the
// recorded bytes exactly.
func unspliced(b []byte) string { return spliced.ReplaceAllString(string(b), "") }

func TestReplayKeepsTheRecordedBytes(t *testing.T) {
	at := time.Date(2026, 11, 30, 15, 4, 5, 0, time.UTC)
	for _, res := range []string{
		`{"content":[{"type":"text","text":"cut \ud83d <b>"}], "structuredContent":{"big":1e400,"k":1,"k":2},"isError":false,"_meta":{"x":1}}`,
		`{ "_meta" : { } , "content" : [ ] }`,
		`{"content":[{"type":"text","text":"a"}]}`,
		`{"isError":false}`,
		`{}`,
	} {
		c := &fence.Cert{Intent: `wrap:t:"x"`, Hash: "ab12", Result: json.RawMessage(res)}
		out := replay(c, at)
		if !json.Valid(out) {
			t.Fatalf("replay of %s is not JSON: %s", res, out)
		}
		var m struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatal(err)
		}
		if string(m.Meta[MetaReplayed]) != "true" || string(m.Meta[MetaRecordedAt]) != `"2026-11-30T15:04:05Z"` || len(m.Content) == 0 {
			t.Fatalf("replay of %s: %s", res, out)
		}
		note := m.Content[len(m.Content)-1].Text
		if !strings.Contains(note, "identical earlier call (recorded at 2026-11-30T15:04:05Z)") || !strings.Contains(note, "did NOT run again") || !strings.Contains(note, RepeatArg) {
			t.Fatalf("note: %s", note)
		}
		if strings.Contains(res, `"_meta"`) && strings.Contains(res, `"content"`) {
			if got := unspliced(out); got != res {
				t.Fatalf("recorded bytes changed:\n%s\n%s", got, res)
			}
		}
	}
	// Not an object: unchanged.
	if out := replay(&fence.Cert{Result: json.RawMessage(`"x"`)}, at); string(out) != `"x"` {
		t.Fatal(string(out))
	}
}

func TestRemoveMember(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"effectfence_repeat":"2"}`, `{}`},
		{`{"a":1.50, "effectfence_repeat":"2" ,"b":[1]}`, `{"a":1.50 ,"b":[1]}`},
		{`{ "effectfence_repeat" : 2 , "a" : 1 }`, `{  "a" : 1 }`},
		{`{"a":1,"effectfence_repeat":null}`, `{"a":1}`},
	} {
		got, ok := removeMember([]byte(c.in), RepeatArg)
		if !ok || string(got) != c.want || !json.Valid(got) {
			t.Errorf("removeMember(%s) = %s, want %s", c.in, got, c.want)
		}
	}
	if _, ok := removeMember([]byte(`{"a":{"effectfence_repeat":1}}`), RepeatArg); ok {
		t.Error("only a top-level member is removed")
	}
}

func TestReplayItemIsTheNoteEncoded(t *testing.T) {
	for _, at := range []time.Time{time.Date(2026, 11, 30, 15, 4, 5, 123, time.UTC), time.Date(1999, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))} {
		want := `{"type":"text","text":` + string(canon.AppendString(nil, replayNote(at))) + `,"_meta":{"` + MetaNote + `":true}}`
		if got := replayItem(at); got != want {
			t.Fatalf("replayItem(%s):\n%s\nwant\n%s", at, got, want)
		}
	}
}

// TestReplayOfANullOrTwiceNamedMetaOrContent holds docs/wrap.md's "a replay is marked in _meta
// and its content ends with a note" for the recorded results that name _meta or content with
// null, or twice. Before, a null _meta or content had a second member of that name added at the
// front: the replay named it twice, and a decoder that reads the last (encoding/json here,
// JSON.parse, Python's json) read the recorded null: no marker, no note. A result naming an
// object twice had the marker added to the first alone, which those decoders do not read.
func TestReplayOfANullOrTwiceNamedMetaOrContent(t *testing.T) {
	at := time.Date(2026, 12, 6, 5, 0, 0, 0, time.UTC)
	for _, c := range []struct{ res, unspliced string }{
		{`{"content":[{"type":"text","text":"a"}],"_meta":null}`, `{"content":[{"type":"text","text":"a"}],"_meta":{}}`},
		{`{"content":null,"isError":false}`, `{"_meta":{},"content":[],"isError":false}`},
		{`{"_meta" : null , "content" : null}`, `{"_meta" : {} , "content" : []}`},
		{`{"_meta":{"a":1},"content":[],"_meta":{"b":2},"content":[{"type":"text","text":"x"}]}`,
			`{"_meta":{"a":1},"content":[],"_meta":{"b":2},"content":[{"type":"text","text":"x"}]}`},
		{`{"_meta":null,"content":[],"_meta":{"b":2}}`, `{"_meta":{},"content":[],"_meta":{"b":2}}`},
	} {
		out := replay(&fence.Cert{Intent: "wrap:t:x", Hash: "ab12", Result: json.RawMessage(c.res)}, at)
		if !json.Valid(out) {
			t.Fatalf("replay of %s is not JSON: %s", c.res, out)
		}
		if got := unspliced(out); got != c.unspliced {
			t.Fatalf("replay of %s:\n%s\nwithout the additions:\n%s\nwant\n%s", c.res, out, got, c.unspliced)
		}
		// The last of each name, as encoding/json reads it.
		var last struct {
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			Meta map[string]json.RawMessage `json:"_meta"`
		}
		if err := json.Unmarshal(out, &last); err != nil {
			t.Fatal(err)
		}
		if string(last.Meta[MetaReplayed]) != "true" || len(last.Content) == 0 || !strings.Contains(last.Content[len(last.Content)-1].Text, "did NOT run again") {
			t.Fatalf("replay of %s as a decoder reading the last member sees it: %s", c.res, out)
		}
		// Every _meta and content of the replay holds its addition, the first one included.
		for m := range jsonrpc.Members(out) {
			key, raw := out[m.Key:m.KeyEnd], string(out[m.Start:m.End])
			if jsonrpc.KeyIs(key, "_meta") && !strings.Contains(raw, `"`+MetaReplayed+`":true`) ||
				jsonrpc.KeyIs(key, "content") && !strings.Contains(raw, `"`+MetaNote+`":true`) {
				t.Fatalf("replay of %s: member %s is %s, without its addition", c.res, key, raw)
			}
		}
	}
	// A _meta or content of another type is left as it is, and not named a second time.
	for _, res := range []string{`{"_meta":"x","content":[]}`, `{"_meta":{},"content":{"a":1}}`} {
		out := replay(&fence.Cert{Intent: "wrap:t:x", Hash: "ab12", Result: json.RawMessage(res)}, at)
		if got := unspliced(out); got != res {
			t.Fatalf("replay of %s:\n%s\nwithout the additions:\n%s", res, out, got)
		}
	}
}
