package wrap

import (
	"encoding/json"
	"testing"
)

// A replay is the result the tool returned, byte for byte (docs/identity.md,
// docs/DECISIONS-wrap.md). tasks/result of a task effectfence made adds the related-task mark
// to the recorded result: only the mark may be added, nothing else may change (it used to be
// re-marshalled, which re-escaped <, > and &, dropped spacing and reordered members).
func TestWithRelatedTaskKeepsResultBytes(t *testing.T) {
	id := localTaskPrefix + "x"
	mark := `"` + relatedTaskMeta + `":{"taskId":"` + id + `"}`
	for _, tc := range []struct{ name, in, want string }{
		{"no _meta", `{"content":[{"type":"text","text":"a<b && c>d"}], "isError":false}`,
			`{"content":[{"type":"text","text":"a<b && c>d"}], "isError":false,"_meta":{` + mark + `}}`},
		{"a _meta with members", "{ \"_meta\": {\"k\": \"<v>\"} ,\n \"content\": [] }\n",
			"{ \"_meta\": {\"k\": \"<v>\"," + mark + "} ,\n \"content\": [] }\n"},
		{"an empty _meta", `{"_meta":{ },"content":[]}`, `{"_meta":{ ` + mark + `},"content":[]}`},
		{"a _meta that is not an object", `{"_meta":null,"content":[]}`, `{"_meta":{` + mark + `},"content":[]}`},
		{"an empty result", ` {} `, ` {"_meta":{` + mark + `}} `},
		// The server's mark is replaced, not followed by ours: a reader that keeps the first of
		// two members would otherwise see the task id of another attempt.
		{"the server's own mark", `{"_meta":{"a":1, "` + relatedTaskMeta + `" : {"taskId":"theirs"} ,"b":2}}`,
			`{"_meta":{"a":1, ` + mark + ` ,"b":2}}`},
		{"the server's mark twice, once escaped", `{"_meta":{"` + relatedTaskMeta + `":{"taskId":"a"},"io.modelcontextprotocol\/related-task":{"taskId":"b"}}}`,
			`{"_meta":{` + mark + `,` + mark + `}}`},
		{"duplicate _meta members: the last is the one parsers keep", `{"_meta":{},"_meta":{"a":1}}`,
			`{"_meta":{},"_meta":{"a":1,` + mark + `}}`},
		{"not an object", `[1,2]`, `[1,2]`},
		{"not JSON", `{"a":`, `{"a":`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := string(withRelatedTask(json.RawMessage(tc.in), id))
			if got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if tc.in == tc.want {
				return
			}
			var parsed struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			}
			var m struct {
				TaskID string `json:"taskId"`
			}
			if err := json.Unmarshal([]byte(got), &parsed); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(parsed.Meta[relatedTaskMeta], &m); err != nil || m.TaskID != id {
				t.Fatalf("parsed %s (%v): the mark is not the one a parser keeps", parsed.Meta[relatedTaskMeta], err)
			}
		})
	}
}
