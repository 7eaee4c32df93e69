package wrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/hide"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// MetaResultNotKept marks the answer to a duplicate of a call whose result the ledger did not
// keep (--keep-result TOOL=hash).
const MetaResultNotKept = "effectfence/result_not_kept"

// ParseRedact parses a --redact value "TOOL:json.path" (dotted member names; "*" matches every
// member or element).
func ParseRedact(s string) (tool, path string, err error) {
	tool, path, ok := cutLast(s)
	if !ok {
		return "", "", fmt.Errorf("--redact %q: want TOOL:json.path, e.g. charge:card.number", s)
	}
	if err := fence.CheckRedactPath(path); err != nil {
		return "", "", fmt.Errorf("--redact %q: %v", s, err)
	}
	return tool, path, nil
}

// ParseKeepResult parses a --keep-result value "TOOL=hash" or "TOOL=full".
func ParseKeepResult(s string) (tool string, keep fence.KeepResult, err error) {
	i := strings.LastIndexByte(s, '=')
	if i <= 0 {
		return "", "", fmt.Errorf("--keep-result %q: want TOOL=hash or TOOL=full, e.g. create_api_key=hash", s)
	}
	if s[i+1:] == "" {
		return "", "", fmt.Errorf("--keep-result %q: want TOOL=hash or TOOL=full", s)
	}
	keep, err = fence.ParseKeepResult(s[i+1:])
	if err != nil {
		return "", "", fmt.Errorf("--keep-result %q: want hash or full after '='", s)
	}
	return s[:i], keep, nil
}

// withPrivacy adds the tool's privacy settings to a request.
func (p *Proxy) withPrivacy(req fence.Request) fence.Request {
	s := p.settings(req.Tool)
	req.Redact, req.KeepResult = s.Redact, s.KeepResult
	return req
}

// replayOf is the answer to a duplicate: the recorded result, or, when only its digest was
// kept, a plain statement that the call was done and when. The statement has no
// structuredContent, so for a tool with an output schema (outputSchema) it is marked isError,
// and says why: MCP's SDK clients refuse such a tool's result without structuredContent
// unless it is (the TypeScript client throws "has an output schema but did not return
// structured content"), and the agent would be told that instead of the statement.
func replayOf(adm fence.Admission, outputSchema bool) json.RawMessage {
	if !adm.ResultNotKept {
		out := replay(adm.Cert, adm.RecordedAt)
		if outputSchema && confirmedWithoutStructure(adm.Cert.Result) {
			// effectfence's own statement that a person confirmed the call (ledger resolve
			// --happened, or the elicitation's answer), not a result of the tool: marked isError
			// for the same reason as the statement below.
			open := jsonrpc.SkipSpace(out, 0) + 1
			out = append(append(append(make([]byte, 0, len(out)+15), out[:open]...), `"isError":true,`...), out[open:]...)
		}
		return out
	}
	text := fmt.Sprintf("effectfence: an identical earlier call was already executed (recorded at %s), so this call was NOT executed again. "+
		"Its result was not kept (this tool's results are recorded only as a SHA-256), so it cannot be shown here. "+
		"To run the action again deliberately, make it a different call (change its arguments).",
		adm.RecordedAt.UTC().Format(time.RFC3339))
	if outputSchema {
		text += " This answer is marked isError only because the tool's output schema asks for a structured result, which was not kept: the call did not fail, it ran once, earlier."
	}
	out, _ := json.Marshal(map[string]any{
		"content": []map[string]string{{"type": "text", "text": text}},
		"isError": outputSchema,
		"_meta": map[string]any{
			MetaReplayed: true, MetaIntent: adm.Cert.Intent, MetaCert: adm.Cert.Hash, MetaResultNotKept: true,
		},
	})
	return out
}

// confirmedWithoutStructure reports whether res is fence.ConfirmedResult's kind of result: an
// object whose _meta names a person's confirmation, with no structuredContent and no isError.
func confirmedWithoutStructure(res json.RawMessage) bool {
	if !json.Valid(res) {
		return false
	}
	meta := jsonrpc.MemberValue(res, "_meta")
	return len(meta) > 0 && len(jsonrpc.MemberValue(meta, fence.MetaResolved)) > 0 &&
		jsonrpc.MemberValue(res, "structuredContent") == nil && jsonrpc.MemberValue(res, "isError") == nil
}

// redactedTexts returns the argument values a call redacts (its tool's Redact paths), as a
// server could echo them in an error message or on its stderr: every string at or inside a
// redacted path (a value, or the name of a member of an object there) as it is, as the call
// spelled it (its own escapes: "\u0034111", "a\/b") and JSON-escaped the ways common encoders
// write it (Go's, with and without HTML escapes; every non-ASCII character as \u escapes, as
// Python's json.dumps does by default; and also "/" as "\/", as PHP's json_encode does), and
// every number or boolean as the call spelled it; longest first. wrap removes them from the
// server's words it records as a reason, so a redacted value does not reach the ledger that
// way either.
func (p *Proxy) redactedTexts(tool string, params json.RawMessage) []string {
	paths := p.settings(tool).Redact
	if len(paths) == 0 {
		return nil
	}
	var call struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal(params, &call) != nil {
		return nil
	}
	seen := map[string]bool{}
	var texts []string
	addText := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			texts = append(texts, s)
		}
	}
	// addString adds a JSON string (raw, quotes included) decoded, as spelled, and escaped.
	addString := func(raw []byte) {
		var s string
		if len(raw) < 2 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return
		}
		addText(s)
		addText(string(raw[1 : len(raw)-1]))
		for _, e := range jsonEscapes(s) {
			addText(e)
		}
	}
	// leaves adds every string (member names included: the record keeps "[redacted]" for the
	// whole object, so a name, a card number keying a map or an e-mail address, is not kept
	// either), number and boolean inside raw, each as the call spelled it. Every token of the
	// value is one of these, null or punctuation, so the value is read once, token by token,
	// whatever its nesting: decoding each level's value again from a copy of its own cost the
	// value's size once per level and held every copy at once (a string of 60 MB under 9,900
	// levels, which wrap accepts, asked for hundreds of GB before the call was sent).
	// raw was read by json.Unmarshal, so it is valid JSON and jsonrpc's scanners may walk it.
	leaves := func(raw json.RawMessage) {
		for i := 0; i < len(raw); {
			switch c := raw[i]; c {
			case ' ', '\t', '\n', '\r', ',', ':', '{', '}', '[', ']':
				i++
			case '"':
				end := jsonrpc.EndOfString(raw, i)
				addString(raw[i:end])
				i = end
			default: // a number, a boolean or null
				end := jsonrpc.EndOfValue(raw, i)
				if c != 'n' { // null says nothing
					addText(string(raw[i:end]))
				}
				i = end
			}
		}
	}
	var walk func(raw json.RawMessage, segs []string)
	walk = func(raw json.RawMessage, segs []string) {
		if len(segs) == 0 {
			leaves(raw)
			return
		}
		switch raw = bytes.TrimSpace(raw); {
		case len(raw) > 0 && raw[0] == '{':
			var m map[string]json.RawMessage
			_ = json.Unmarshal(raw, &m)
			if segs[0] == "*" {
				for _, e := range m {
					walk(e, segs[1:])
				}
			} else if e, ok := m[segs[0]]; ok {
				walk(e, segs[1:])
			}
		case len(raw) > 0 && raw[0] == '[' && segs[0] == "*":
			var a []json.RawMessage
			_ = json.Unmarshal(raw, &a)
			for _, e := range a {
				walk(e, segs[1:])
			}
		}
	}
	for _, path := range paths {
		walk(call.Arguments, strings.Split(path, "."))
	}
	sort.Slice(texts, func(i, j int) bool { return len(texts[i]) > len(texts[j]) })
	return texts
}

// jsonEscapes returns s JSON-escaped (without the quotes) as common encoders write it: Go's
// without and with HTML escapes, and with every character beyond ASCII written as \u escapes
// (UTF-16 surrogate pairs beyond the BMP), as it is and with "/" written "\/".
func jsonEscapes(s string) []string {
	var out []string
	for _, html := range []bool{false, true} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(s) != nil {
			return out
		}
		out = append(out, strings.TrimSuffix(strings.TrimSuffix(b.String(), "\n"), `"`)[1:])
	}
	var ascii strings.Builder
	for _, r := range out[0] {
		switch {
		case r < utf8.RuneSelf:
			ascii.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&ascii, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&ascii, `\u%04x`, r)
		}
	}
	return append(out, ascii.String(), strings.ReplaceAll(ascii.String(), "/", `\/`))
}

// scrub replaces every occurrence of texts in s with fence.Redacted (hide.Replace).
func scrub(s string, texts []string) string { return hide.Replace(s, texts) }

// hider is a connection to a child that can keep a call's redacted values out of what it
// reports of the child (mcpstdio.Session.Hide: the tail of its stderr).
type hider interface{ Hide(texts []string) }

// hide hands the redacted values of a call of tool to the connection it is sent on, before it
// is sent, if the connection can take them: the child may print them on its stderr, and the
// tail of that stderr is quoted in the reason of whichever call it dies during, this one or
// another.
func (p *Proxy) hide(c Conn, tool string, params json.RawMessage) {
	if h, ok := c.(hider); ok && len(p.settings(tool).Redact) > 0 {
		h.Hide(p.redactedTexts(tool, params))
	}
}
