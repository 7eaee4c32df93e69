package wrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// Path is a dotted path into a tool's arguments object ("customer.id"). Segments address
// object members only.
type Path []string

// ParsePath splits a dotted path; empty segments are refused, and so is a "*" segment: in a
// --redact path it matches every member or element, here it would name a member called "*",
// which no call has, so the field meant would be kept in the identity (a retry with a fresh
// timestamp run again) or read as absent.
func ParsePath(s string) (Path, error) {
	p := Path(strings.Split(s, "."))
	if err := p.check(); err != nil {
		return nil, err
	}
	return p, nil
}

// check refuses an empty or "*" segment (ParsePath).
func (p Path) check() error {
	for _, seg := range p {
		switch seg {
		case "":
			return fmt.Errorf("path %q has an empty segment", p.String())
		case "*":
			return fmt.Errorf("path %q has a \"*\" segment: key and ignored fields are named member by member (a \"*\" matches every member only in a redact path)", p.String())
		}
	}
	return nil
}

func (p Path) String() string { return strings.Join(p, ".") }

// IgnoredKey returns a key path that an ignored path cuts (the same path, or one of its
// parents), and that ignored path. Ignored fields leave the arguments before the key is read,
// so such a key field is null in every call: distinct calls would share one intent and the
// second be answered with the first's receipt.
func IgnoredKey(key, ignore []Path) (Path, Path, bool) {
	for _, k := range key {
		for _, i := range ignore {
			if len(i) <= len(k) && slices.Equal(i, k[:len(i)]) {
				return k, i, true
			}
		}
	}
	return nil, nil, false
}

// IgnoredKeyError says why key path k cut by ignored path i is refused.
func IgnoredKeyError(k, i Path) error {
	return fmt.Errorf("key field %q is ignored (ignore %q): ignored fields are cut before the key is read, so every call would have the same key and distinct calls would be answered as one; take it out of one of the two", k.String(), i.String())
}

// IgnoredRepeat refuses an ignored path that cuts RepeatArg or a part of it. Ignored fields
// are cut before the identity is taken, so the deliberate repeat every replay note asks for
// would be one more duplicate: answered with the first call's receipt, and not run.
func IgnoredRepeat(p Path) error {
	if len(p) > 0 && p[0] == RepeatArg {
		return fmt.Errorf("ignored field %q cuts %s, which names a deliberate repeat (every replay note asks the agent to set it): ignored, the repeat would be answered with the first call's receipt and not run; take it out", p.String(), RepeatArg)
	}
	return nil
}

// ParseIgnoreField parses a --ignore-field value "TOOL:json.path".
func ParseIgnoreField(s string) (tool string, path Path, err error) {
	tool, rest, ok := cutLast(s)
	if !ok {
		return "", nil, fmt.Errorf("--ignore-field %q: want TOOL:json.path, e.g. charge:metadata.timestamp", s)
	}
	path, err = ParsePath(rest)
	if err == nil {
		err = IgnoredRepeat(path)
	}
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

// withoutMember returns the canonical JSON c without the member at p, or c itself when there
// is none, as deleting it from the decoded value and canonicalising again would: a member cut
// from a canonical object leaves it canonical. c is left as it is.
func withoutMember(c []byte, p Path) []byte {
	lo, hi := 0, len(c) // c[lo:hi] is the value the rest of the path is in
	for i, seg := range p {
		v := c[lo:hi]
		if len(v) == 0 || v[0] != '{' {
			return c
		}
		var hit jsonrpc.Span
		found := false
		for m := range jsonrpc.Members(v) {
			if jsonrpc.KeyIs(v[m.Key:m.KeyEnd], seg) {
				hit, found = m, true
				break
			}
		}
		if !found {
			return c
		}
		if i < len(p)-1 {
			lo, hi = lo+hit.Start, lo+hit.End
			continue
		}
		start, end := lo+hit.Key, lo+hit.End
		switch { // no white space in canonical JSON: a comma or a brace on each side
		case c[start-1] == ',':
			start--
		case c[end] == ',':
			end++
		}
		out := make([]byte, 0, len(c)-(end-start))
		return append(append(out, c[:start]...), c[end:]...)
	}
	return c
}

// lookupCanonical returns the value at p in the canonical JSON c (valid, so the scanners may
// read it, and without duplicate names), or null when absent, as lookup does in its decoded
// form.
func lookupCanonical(c []byte, p Path) json.RawMessage {
	for _, seg := range p {
		if len(c) == 0 || c[0] != '{' {
			return json.RawMessage("null")
		}
		start, end, _, _ := jsonrpc.Member(c, seg)
		if start < 0 {
			return json.RawMessage("null")
		}
		c = c[start:end]
	}
	return c
}

// fieldSpelledOtherwise refuses canonical arguments c with a member on the way to one of paths
// named as the path's segment but for case ("Order" for order; Unicode case folding makes ſ
// an s). wrap, and JavaScript and Python servers, read it as another member; a Go server
// decoding the arguments into a struct with encoding/json (go-sdk's typed tools, mcp-go's
// BindArguments) reads it as the field. A key field read as absent named distinct orders as
// one (refused as intent_conflict while the server saw a new order); an ignored field kept in
// the identity ran twice what the server reads as one call but for that field; a redacted one
// was kept in clear. With star, a "*" segment goes on into every member of an object and every
// element of an array (as a --redact path's does); otherwise it is a name. what names the
// paths' role. The arguments are read once for all the paths, a level at a time.
func fieldSpelledOtherwise(c []byte, paths []string, star bool, what string) error {
	if len(paths) == 0 {
		return nil
	}
	at := make([]fieldPath, len(paths))
	for i, p := range paths {
		at[i] = fieldPath{strings.Split(p, "."), p}
	}
	return spelledOtherwiseIn(c, at, star, what)
}

// fieldPath is a path as fieldSpelledOtherwise walks it: the segments left, and the whole.
type fieldPath struct {
	rest []string
	full string
}

func spelledOtherwiseIn(c []byte, paths []fieldPath, star bool, what string) error {
	if len(c) == 0 {
		return nil
	}
	switch c[0] {
	case '[':
		var next []fieldPath
		for _, p := range paths {
			if star && p.rest[0] == "*" && len(p.rest) > 1 {
				next = append(next, fieldPath{p.rest[1:], p.full})
			}
		}
		if len(next) == 0 {
			return nil
		}
		for i := 1; c[i] != ']'; { // canonical: no white space
			end := jsonrpc.EndOfValue(c, i)
			if err := spelledOtherwiseIn(c[i:end], next, star, what); err != nil {
				return err
			}
			if i = end; c[i] == ',' {
				i++
			}
		}
	case '{':
		var next []fieldPath
		for m := range jsonrpc.Members(c) {
			lit := c[m.Key:m.KeyEnd]
			name := lit[1 : len(lit)-1]
			if bytes.IndexByte(name, '\\') >= 0 {
				name = []byte(jsonrpc.Unquote(lit))
			}
			next = next[:0]
			for _, p := range paths {
				seg := p.rest[0]
				switch {
				case string(name) == seg || star && seg == "*":
					if len(p.rest) > 1 {
						next = append(next, fieldPath{p.rest[1:], p.full})
					}
				case bytes.EqualFold(name, []byte(seg)):
					role := what
					if p.full != seg {
						role += " " + strconv.Quote(p.full) + "'s member"
					}
					return fmt.Errorf("member %q of the arguments is the %s %q but for case; servers disagree on whether it is that field", name, role, seg)
				}
			}
			if len(next) > 0 {
				if err := spelledOtherwiseIn(c[m.Start:m.End], next, star, what); err != nil { // read only
					return err
				}
			}
		}
	}
	return nil
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
	c := canonArgs
	if c == nil {
		var err error
		if c, err = canon.JSON(args); err != nil {
			return id, err
		}
	}
	if err := fieldSpelledOtherwise(c, pathStrings(key), false, "key field"); err != nil {
		return id, err
	}
	if err := fieldSpelledOtherwise(c, pathStrings(ignore), false, "ignored field"); err != nil {
		return id, err
	}
	// Ignored fields are cut from the canonical bytes: decoding the arguments, deleting them
	// and encoding and canonicalising the rest took about 260 ns and 68 bytes of allocation
	// per byte of arguments.
	for _, p := range ignore {
		c = withoutMember(c, p)
	}
	id.args = c
	id.fp = canon.Sum(canon.ToolCallCanonical(tool, c))
	named := c
	if len(key) > 0 {
		// Only the values at the key paths are read, from the canonical bytes: decoding the
		// whole arguments to read a field took about 230 ns and 40 bytes of allocation per
		// byte of them.
		fields := make(map[string]json.RawMessage, len(key)+1)
		for _, p := range key {
			fields[p.String()] = lookupCanonical(c, p)
		}
		// The repeat argument names a deliberate repeat with a key too: without it, the same
		// key fields named the same intent, and the repeat the replay note asks for was
		// refused as intent_conflict. Absent, it leaves the intent as it always was.
		if v := jsonrpc.MemberValue(c, RepeatArg); v != nil {
			fields[RepeatArg] = v
		}
		var err error
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

// pathStrings returns the dotted form of each path.
func pathStrings(ps []Path) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
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
//
// It and removeMember find members with jsonrpc's scanners once canon.Valid has accepted the
// whole: a json.Decoder read token by token took about 100 ns and 17 bytes of allocation per
// byte of arguments, seconds for a request of tens of megabytes.
func injectKey(args []byte, prop, value string) ([]byte, bool) {
	open, ok := validObject(args)
	if !ok {
		return args, false
	}
	v, _ := json.Marshal(value)
	empty := true
	for m := range jsonrpc.Members(args) {
		empty = false
		if !jsonrpc.KeyIs(args[m.Key:m.KeyEnd], prop) {
			continue
		}
		if t := string(args[m.Start:m.End]); t != `""` && t != "null" {
			return args, false
		}
		out := make([]byte, 0, len(args)-(m.End-m.Start)+len(v))
		return append(append(append(out, args[:m.Start]...), v...), args[m.End:]...), true
	}
	out := make([]byte, 0, len(args)+len(prop)+len(v)+8)
	out = append(out, args[:open+1]...)
	out = canon.AppendString(out, prop)
	out = append(out, ':')
	out = append(out, v...)
	if !empty {
		out = append(out, ',')
	}
	return append(out, args[open+1:]...), true
}

// validObject says whether args is one valid JSON object, and where its '{' is.
func validObject(args []byte) (int, bool) {
	open := jsonrpc.SkipSpace(args, 0)
	if open == len(args) || args[open] != '{' || !canon.Valid(args) {
		return 0, false
	}
	return open, true
}

// removeMember returns args without its top-level member name (every other byte kept); ok is
// false when there is no such member.
func removeMember(args []byte, name string) ([]byte, bool) {
	if !bytes.Contains(args, []byte(name)) && bytes.IndexByte(args, '\\') < 0 {
		return args, false // the name is not there, not even escaped
	}
	if _, ok := validObject(args); !ok {
		return args, false
	}
	k, prevEnd := 0, 0
	for m := range jsonrpc.Members(args) {
		if !jsonrpc.KeyIs(args[m.Key:m.KeyEnd], name) {
			k, prevEnd = k+1, m.End
			continue
		}
		start, end := m.Key, m.End
		if k > 0 {
			start = jsonrpc.SkipSpace(args, prevEnd) // cut ", name: value"
		} else if j := jsonrpc.SkipSpace(args, m.End); args[j] == ',' {
			end = j + 1 // first of several: cut "name: value," up to the next member
		}
		out := make([]byte, 0, len(args)-(end-start))
		return append(append(out, args[:start]...), args[end:]...), true
	}
	return args, false
}
