package wrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/effectfence/effectfence/pkg/canon"
)

// Path is a dotted path into a tool's arguments object ("customer.id"). Segments address
// object members only.
type Path []string

// ParsePath splits a dotted path; empty segments are refused.
func ParsePath(s string) (Path, error) {
	parts := strings.Split(s, ".")
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("path %q has an empty segment", s)
		}
	}
	return Path(parts), nil
}

func (p Path) String() string { return strings.Join(p, ".") }

// ParseIgnoreField parses a --ignore-field value "TOOL:json.path".
func ParseIgnoreField(s string) (tool string, path Path, err error) {
	tool, rest, ok := cutLast(s)
	if !ok {
		return "", nil, fmt.Errorf("--ignore-field %q: want TOOL:json.path, e.g. charge:metadata.timestamp", s)
	}
	path, err = ParsePath(rest)
	if err != nil {
		return "", nil, fmt.Errorf("--ignore-field %q: %v", s, err)
	}
	return tool, path, nil
}

// ParseKey parses a --key value "TOOL:path,path".
func ParseKey(s string) (tool string, paths []Path, err error) {
	tool, rest, ok := cutLast(s)
	if !ok {
		return "", nil, fmt.Errorf("--key %q: want TOOL:path[,path...], e.g. charge:order_id", s)
	}
	for _, f := range strings.Split(rest, ",") {
		p, err := ParsePath(f)
		if err != nil {
			return "", nil, fmt.Errorf("--key %q: %v", s, err)
		}
		paths = append(paths, p)
	}
	return tool, paths, nil
}

// cutLast splits at the last ':' (tool names may contain ':'; paths here may not).
func cutLast(s string) (string, string, bool) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// remove deletes the member at p from v (a decoded JSON value), if present.
func remove(v any, p Path) {
	for i, seg := range p {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		if i == len(p)-1 {
			delete(m, seg)
			return
		}
		v = m[seg]
	}
}

// lookup returns the value at p, or nil (JSON null) when absent.
func lookup(v any, p Path) any {
	for _, seg := range p {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[seg]
	}
	return v
}

// decode parses JSON keeping numbers as json.Number, so re-encoding changes no value.
func decode(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

// identity is how one call is named in the ledger.
type identity struct {
	args []byte // canonical arguments with ignored fields removed: fingerprinted by the engine
	// fp is the engine's fingerprint of the call (tool and full canonical arguments): only
	// attempts with equal fingerprints are the same call, whatever --key says.
	fp     string
	hash   string // the intent's hash: of {args, scope, tool}, args being the --key fields with --key
	intent string
	exact  []byte // the arguments exactly as forwarded to the server, kept in the ledger
}

// identify derives the identity of a call of tool with args (a JSON object) in scope (the
// server's scope id, see store.WrapScope).
func identify(scope, tool string, args []byte, ignore []Path, key []Path) (identity, error) {
	return identifyCanon(scope, tool, args, nil, ignore, key)
}

// identifyCanon is identify given, when canonArgs is not nil, the canonical form of args
// (decodeCall has it), which it then need not compute again.
func identifyCanon(scope, tool string, args, canonArgs []byte, ignore []Path, key []Path) (identity, error) {
	var id identity
	if len(ignore) > 0 {
		canonArgs = nil
		v, err := decode(args)
		if err != nil {
			return id, err
		}
		for _, p := range ignore {
			remove(v, p)
		}
		if args, err = canon.Marshal(v); err != nil {
			return id, err
		}
	}
	c := canonArgs
	if c == nil {
		var err error
		if c, err = canon.JSON(args); err != nil {
			return id, err
		}
	}
	id.args = c
	id.fp = canon.Sum(canon.ToolCallCanonical(tool, c))
	named := c
	if len(key) > 0 {
		v, err := decode(c)
		if err != nil {
			return id, err
		}
		fields := map[string]any{}
		for _, p := range key {
			fields[p.String()] = lookup(v, p)
		}
		if named, err = canon.Marshal(fields); err != nil {
			return id, err
		}
	}
	// {"args":…,"scope":…,"tool":…} in canonical member order.
	var buf [256]byte // on the stack unless the arguments are long
	obj := append(append(buf[:0], `{"args":`...), named...)
	obj = append(obj, `,"scope":`...)
	obj = canon.AppendString(obj, scope)
	obj = append(obj, `,"tool":`...)
	obj = canon.AppendString(obj, tool)
	obj = append(obj, '}')
	id.hash = canon.Sum(obj)
	id.intent = "wrap:" + tool + ":" + id.hash
	return id, nil
}

// flightKey names the attempts of this very call in this process: intent and fingerprint.
type flightKey struct{ intent, fp string }

func (id identity) flightKey() flightKey { return flightKey{id.intent, id.fp} }

// keyLike reports whether a property name is an idempotency key by convention.
func keyLike(name string) bool {
	n := keySeparators.Replace(strings.ToLower(name))
	switch n {
	case "idempotencykey", "idempotencytoken", "idempotencyid", "requestid", "clientrequestid",
		"clienttoken", "dedupekey", "dedupkey", "deduplicationkey", "deduplicationid", "dedupeid":
		return true
	}
	return false
}

// keySeparators drops what keyLike ignores. It is made once: strings.NewReplacer builds its
// tables when made, about 900 bytes, and keyLike runs for every property of every tool a
// server lists (a listing of 8 MB allocated 1.8 GB).
var keySeparators = strings.NewReplacer("_", "", "-", "")

// injectKey sets args[prop] to value when the member is absent, null or "" and returns the new
// arguments; ok is false when args were left alone. Only the member's value is written: every
// other byte of args is kept as received.
func injectKey(args []byte, prop, value string) ([]byte, bool) {
	d := json.NewDecoder(bytes.NewReader(args))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return args, false
	}
	v, _ := json.Marshal(value)
	empty := true
	for d.More() {
		empty = false
		tok, err := d.Token()
		if err != nil {
			return args, false
		}
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return args, false
		}
		if tok != prop {
			continue
		}
		if t := string(raw); t != `""` && t != "null" {
			return args, false
		}
		end := int(d.InputOffset())
		out := append(append(append([]byte{}, args[:end-len(raw)]...), v...), args[end:]...)
		return out, true
	}
	open := bytes.IndexByte(args, '{')
	out := append([]byte{}, args[:open+1]...)
	out = append(out, canon.AppendString(nil, prop)...)
	out = append(out, ':')
	out = append(out, v...)
	if !empty {
		out = append(out, ',')
	}
	return append(out, args[open+1:]...), true
}

// removeMember returns args without its top-level member name (every other byte kept); ok is
// false when there is no such member.
func removeMember(args []byte, name string) ([]byte, bool) {
	if !bytes.Contains(args, []byte(name)) && bytes.IndexByte(args, '\\') < 0 {
		return args, false // the name is not there, not even escaped
	}
	d := json.NewDecoder(bytes.NewReader(args))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return args, false
	}
	type span struct{ start, end int } // from after the previous value (or '{') to the end of this one
	var spans []span
	hit := -1
	for d.More() {
		start := int(d.InputOffset())
		tok, err := d.Token()
		if err != nil {
			return args, false
		}
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return args, false
		}
		spans = append(spans, span{start, int(d.InputOffset())})
		if tok == name && hit < 0 {
			hit = len(spans) - 1
		}
	}
	if hit < 0 {
		return args, false
	}
	s := spans[hit]
	out := append([]byte{}, args[:s.start]...)
	switch {
	case hit > 0: // cut ", name: value"
	case len(spans) > 1: // first of several: cut "name: value," up to the next member
		s.end = spans[1].start + bytes.IndexByte(args[spans[1].start:], ',') + 1
	}
	return append(out, args[s.end:]...), true
}
