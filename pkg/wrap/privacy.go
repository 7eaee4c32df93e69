package wrap

import (
	"encoding/json"
	"fmt"
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
