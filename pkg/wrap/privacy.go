package wrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
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
// kept, a plain statement that the call was done and when.
func replayOf(adm fence.Admission) json.RawMessage {
	if !adm.ResultNotKept {
		return replay(adm.Cert, adm.RecordedAt)
	}
	text := fmt.Sprintf("effectfence: an identical call was already executed at %s, so this call was NOT executed again. "+
		"Its result was not kept (this tool's results are recorded only as a SHA-256), so it cannot be shown here. "+
		"To run the action again deliberately, make it a different call (change its arguments).",
		adm.RecordedAt.UTC().Format(time.RFC3339))
	out, _ := json.Marshal(map[string]any{
		"content": []map[string]string{{"type": "text", "text": text}},
		"isError": false,
		"_meta": map[string]any{
			MetaReplayed: true, MetaIntent: adm.Cert.Intent, MetaCert: adm.Cert.Hash, MetaResultNotKept: true,
		},
	})
	return out
}

// redactedTexts returns the argument values a call redacts (its tool's Redact paths), as a
// server could echo them in an error message or on its stderr: every string (as it is and
// JSON-escaped) and every number or boolean at or inside a redacted path, longest first. wrap
// removes them from the server's words it records as a reason, so a redacted value does not
// reach the ledger that way either.
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
	var args any
	dec := json.NewDecoder(bytes.NewReader(call.Arguments))
	dec.UseNumber()
	if dec.Decode(&args) != nil {
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
	var leaves func(v any)
	leaves = func(v any) {
		switch v := v.(type) {
		case string:
			addText(v)
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			if enc.Encode(v) == nil {
				addText(strings.TrimSuffix(strings.TrimSuffix(b.String(), "\n"), `"`)[1:])
			}
		case json.Number:
			addText(v.String())
		case bool:
			addText(strconv.FormatBool(v))
		case map[string]any:
			for _, e := range v {
				leaves(e)
			}
		case []any:
			for _, e := range v {
				leaves(e)
			}
		}
	}
	var walk func(v any, segs []string)
	walk = func(v any, segs []string) {
		if len(segs) == 0 {
			leaves(v)
			return
		}
		switch v := v.(type) {
		case map[string]any:
			if segs[0] == "*" {
				for _, e := range v {
					walk(e, segs[1:])
				}
			} else if e, ok := v[segs[0]]; ok {
				walk(e, segs[1:])
			}
		case []any:
			if segs[0] == "*" {
				for _, e := range v {
					walk(e, segs[1:])
				}
			}
		}
	}
	for _, path := range paths {
		walk(args, strings.Split(path, "."))
	}
	sort.Slice(texts, func(i, j int) bool { return len(texts[i]) > len(texts[j]) })
	return texts
}

// scrub replaces every occurrence of texts (longest first) in s with fence.Redacted.
func scrub(s string, texts []string) string {
	for _, t := range texts {
		s = strings.ReplaceAll(s, t, fence.Redacted)
	}
	return s
}
