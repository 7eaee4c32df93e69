package wrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// DefaultReplayWindow is how long a recorded result answers an identical call (see
// docs/identity.md for why ten minutes): retries after a timeout, a dropped stream or a
// gateway restart come within seconds to a few minutes; an identical call later than that is
// more likely a deliberate repeat (toggle again, buy again) and runs as a new action.
const DefaultReplayWindow = 10 * time.Minute

// Bounds of a replay window (Options.ReplayWindow, ReplayWindows, ToolSettings.ReplayWindow,
// the policy's replay_window and --replay-window): below a second no retry would be answered
// with the recorded result (a window written as seconds, 600, is 600 ns); past the longest
// result TTL the record is gone before the window ends.
const (
	MinReplayWindow = time.Second
	MaxReplayWindow = 366 * 24 * time.Hour
)

// RepeatArg is the argument an agent adds to ask for a deliberate new action with the same
// arguments: a call with a value not used before is a new call; a retry with the same value
// is the same call and receives its recorded result. wrap removes it before the call reaches
// the server (unless the tool's own schema declares it).
const RepeatArg = "effectfence_repeat"

// MetaNote marks (in its _meta) the text content item wrap appends to a replayed result.
// Everything else in a replay is the recorded result, byte for byte.
const MetaNote = "effectfence/note"

// MetaRecordedAt is the _meta key of a replay carrying when the result was recorded.
const MetaRecordedAt = "effectfence/recorded_at"

// replayNote is the text a replay tells the model. at is when the result was recorded: the
// call's end, or when a person resolved an unknown outcome as happened (not when the call was
// made, which a note said before 2026-12-06).
func replayNote(at time.Time) string {
	return fmt.Sprintf("effectfence: this is the recorded result of an identical earlier call (recorded at %s); the tool did NOT run again. "+
		"If you meant a new action (not a retry), call again with the extra argument %q set to a value you have not used for this call, e.g. \"2\"; "+
		"a retry with the same value gets the same recorded result.", at.UTC().Format(time.RFC3339), RepeatArg)
}

// replayItemParts is the content item of replayItem, encoded once, cut where the time goes
// (a time in RFC 3339 needs no escaping in JSON).
var replayItemParts = sync.OnceValue(func() [2]string {
	const zero = "0001-01-01T00:00:00Z"
	item := fmt.Sprintf(`{"type":"text","text":%s,"_meta":{"%s":true}}`, canon.AppendString(nil, replayNote(time.Time{})), MetaNote)
	i := strings.Index(item, zero)
	return [2]string{item[:i], item[i+len(zero):]}
})

// replayItem is the content item a replay appends: replayNote(at) as text, marked MetaNote.
func replayItem(at time.Time) string { return string(appendReplayItem(nil, at)) }

// appendReplayItem appends replayItem(at) to b.
func appendReplayItem(b []byte, at time.Time) []byte {
	p := replayItemParts()
	b = append(b, p[0]...)
	b = at.UTC().AppendFormat(b, time.RFC3339)
	return append(b, p[1]...)
}

// appendReplayMeta appends the members replay adds to a result's _meta (without braces).
func appendReplayMeta(b []byte, c *fence.Cert, at time.Time) []byte {
	b = append(b, `"`+MetaReplayed+`":true,"`+MetaIntent+`":`...)
	b = canon.AppendString(b, c.Intent)
	b = append(b, `,"`+MetaCert+`":`...)
	b = canon.AppendString(b, c.Hash)
	b = append(b, `,"`+MetaRecordedAt+`":"`...)
	b = at.UTC().AppendFormat(b, time.RFC3339Nano) // needs no escaping
	return append(b, '"')
}

// replay returns the recorded result exactly as the tool returned it, with two additions
// spliced in (every other byte is the recorded one): the replay marker in the result's _meta
// (effectfence/replayed, intent, cert hash, recorded_at) and one text content item at the end
// of content, marked with MetaNote, that tells the model what happened. A recorded result
// that is not a JSON object is returned unchanged.
//
// The additions go into every top-level _meta object and content array (a result that names
// one twice is read by some decoders at its first and by others at its last), a _meta or
// content that is null is replaced by the object or array of the addition alone (null holds
// nothing of the result), and one of another type is left as it is. A member is added only
// when the result has no member of that name at all: adding one beside a null member, as
// replay did before, made a result naming it twice, whose decoders (encoding/json, JSON.parse)
// read the recorded null and lost the marker or the note.
func replay(c *fence.Cert, at time.Time) json.RawMessage {
	res := c.Result
	if !json.Valid(res) {
		return res
	}
	open := jsonrpc.SkipSpace(res, 0) + 1
	if res[open-1] != '{' {
		return res
	}
	type edit struct {
		at, end int  // res[at:end] is replaced (at == end: an insertion)
		meta    bool // the marker's members, else the note's item
		whole   bool // with the braces or brackets around it
		comma   bool // followed by a comma (the object or array holds more)
	}
	var edits []edit
	hasMeta, hasContent := false, false
	members := 0
	for m := range jsonrpc.Members(res) {
		members++
		key := res[m.Key:m.KeyEnd]
		raw := res[m.Start:m.End]
		meta := jsonrpc.KeyIs(key, "_meta")
		if !meta && !jsonrpc.KeyIs(key, "content") {
			continue
		}
		if meta {
			hasMeta = true
		} else {
			hasContent = true
		}
		inner := bytes.TrimSpace(raw[1:max(1, len(raw)-1)])
		switch {
		case string(raw) == "null":
			edits = append(edits, edit{at: m.Start, end: m.End, meta: meta, whole: true})
		case meta && raw[0] == '{':
			edits = append(edits, edit{at: m.Start + 1, end: m.Start + 1, meta: true, comma: len(inner) > 0})
		case !meta && raw[0] == '[':
			// The note goes last: before the closing bracket, after a comma if the array holds items.
			edits = append(edits, edit{at: m.End - 1, end: m.End - 1, comma: len(inner) > 0})
		}
	}
	out := make([]byte, 0, len(res)+len(edits)*(len(c.Intent)+len(c.Hash)+len(replayItemParts()[0])+len(replayItemParts()[1])+192)+256)
	out = append(out, res[:open]...)
	// Members that are missing go first, right after the opening brace.
	if !hasMeta {
		out = appendReplayMeta(append(out, `"_meta":{`...), c, at)
		out = append(out, '}')
	}
	if !hasContent {
		if !hasMeta {
			out = append(out, ',')
		}
		out = appendReplayItem(append(out, `"content":[`...), at)
		out = append(out, ']')
	}
	if (!hasMeta || !hasContent) && members > 0 {
		out = append(out, ',')
	}
	// Then the additions inside (or in place of) the members that exist, in the order they come.
	prev := open
	for _, e := range edits {
		out = append(out, res[prev:e.at]...)
		switch {
		case e.meta && e.whole:
			out = append(appendReplayMeta(append(out, '{'), c, at), '}')
		case e.meta:
			out = appendReplayMeta(out, c, at)
			if e.comma {
				out = append(out, ',')
			}
		case e.whole:
			out = append(appendReplayItem(append(out, '['), at), ']')
		default:
			if e.comma {
				out = append(out, ',')
			}
			out = appendReplayItem(out, at)
		}
		prev = e.end
	}
	return append(out, res[prev:]...)
}
