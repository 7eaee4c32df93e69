package wrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// call is a tools/call request decoded strictly: exactly as every server reads it, or refused.
type call struct {
	name string
	args []byte // the "arguments" member exactly as received; {} when absent or null
	// argsStart and argsEnd delimit the "arguments" value in the params (both 0 when absent),
	// so an injected key is spliced in and every other byte is forwarded as received.
	argsStart, argsEnd int
	// canonArgs is args in canonical form (RFC 8785), cut from the canonical params that
	// decodeCall checks the params with: the canonical form of a member is the member's part
	// of the whole's.
	canonArgs []byte
	params    json.RawMessage
	// task: the call is task-augmented (params.task present, MCP 2025-11-25): the server
	// answers with a task handle and the outcome is the task's final result.
	task bool
}

// decodeCall reads tools/call params. Servers disagree on JSON that is ambiguous (Go's
// encoding/json matches member names case-insensitively and keeps the last duplicate; others
// keep the first or refuse), so a fence that read such params one way could record one call
// while the server runs another. The params are therefore refused unless every reading
// agrees: no duplicate member names at any depth, no two names equal but for case, valid
// UTF-8 and no lone surrogate escapes, "name" a non-empty string.
func decodeCall(params json.RawMessage) (call, error) {
	c := call{params: params}
	if len(params) == 0 || params[0] != '{' {
		return c, fmt.Errorf("tools/call params must be an object")
	}
	cp, err := canon.JSON(params) // duplicates at any depth, UTF-8, surrogates
	if err != nil {
		return c, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "canon: "))
	}
	// From here params is known to be one valid JSON object, so the scans below need not
	// check what they skip.
	if err := caseCollisions(params); err != nil {
		return c, err
	}
	seenName := false
	for m := range jsonrpc.Members(params) {
		raw := params[m.Start:m.End]
		switch key := params[m.Key:m.KeyEnd]; {
		case jsonrpc.KeyIs(key, "name"):
			if raw[0] != '"' {
				return c, fmt.Errorf(`"name" must be a non-empty string`)
			}
			if c.name = jsonrpc.Unquote(raw); c.name == "" {
				return c, fmt.Errorf(`"name" must be a non-empty string`)
			}
			seenName = true
		case jsonrpc.KeyIs(key, "arguments"):
			if raw[0] != '{' && string(raw) != "null" {
				return c, fmt.Errorf(`"arguments" must be an object`)
			}
			c.args, c.argsStart, c.argsEnd = raw, m.Start, m.End
		case jsonrpc.KeyIs(key, "task"):
			c.task = string(raw) != "null"
		default:
			if err := spelledOtherwise(key); err != nil {
				return c, err
			}
		}
	}
	if !seenName {
		return c, fmt.Errorf(`"name" is missing`)
	}
	if len(c.args) == 0 || string(c.args) == "null" {
		c.args = []byte("{}") // no arguments and {} are the same call
		c.canonArgs = c.args
	} else if start, end, _, _ := jsonrpc.Member(cp, "arguments"); start >= 0 {
		c.canonArgs = cp[start:end:end]
	}
	return c, nil
}

// callMembers are the members of tools/call params that MCP names (2025-11-25, and SEP-2322's
// continuation of a call).
var callMembers = [...]string{"name", "arguments", "task", "_meta", "inputResponses", "requestState"}

// spelledOtherwise refuses a params member whose name (a string literal) is one of MCP's but
// for case ("Arguments", "argumentſ": Unicode case folding makes ſ an s). By the
// specification it is a member nobody knows, and wrap reads it so; a Go server decoding the
// params with encoding/json (mcp-go does) takes it for MCP's own, so wrap would fence a call
// without arguments while the server ran one with them, and a second call of other
// arguments, spelled so, would be answered with the first one's receipt. Names are compared
// after their escapes are decoded, as jsonrpc's checkEnvelope compares the envelope's.
func spelledOtherwise(lit []byte) error {
	name := lit[1 : len(lit)-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		name = []byte(jsonrpc.Unquote(lit))
	}
	for _, m := range callMembers {
		if string(name) != m && bytes.EqualFold(name, []byte(m)) {
			return fmt.Errorf("member %q is MCP's %q but for case; servers disagree on whether it is that member", name, m)
		}
	}
	return nil
}

// caseCollisions refuses an object with two member names equal but for case at any depth:
// a case-insensitive reader (Go's encoding/json) would take one for the other. raw must be
// valid JSON.
func caseCollisions(raw []byte) error {
	_, err := collisionsIn(raw, jsonrpc.SkipSpace(raw, 0))
	return err
}

// collisionsIn checks the value at i and everything inside it, and returns where it ends.
func collisionsIn(b []byte, i int) (int, error) {
	switch b[i] {
	case '[':
		i = jsonrpc.SkipSpace(b, i+1)
		for b[i] != ']' {
			end, err := collisionsIn(b, i)
			if err != nil {
				return 0, err
			}
			if i = jsonrpc.SkipSpace(b, end); b[i] == ',' {
				i = jsonrpc.SkipSpace(b, i+1)
			}
		}
		return i + 1, nil
	case '{':
		var namesAt [16]seenName
		names := namesAt[:0] // the member names met; an object has few members
		var seen map[string][]byte
		i = jsonrpc.SkipSpace(b, i+1)
		for b[i] != '}' {
			keyEnd := jsonrpc.EndOfString(b, i)
			name := b[i:keyEnd]
			if seen == nil && len(names) == 16 {
				seen = make(map[string][]byte, 32)
				for k := range names {
					seen[names[k].folded()] = names[k].lit
				}
			}
			var prev []byte
			if seen != nil {
				fold := foldKey(jsonrpc.Unquote(name))
				prev = seen[fold]
				seen[fold] = name
			} else {
				n := seenName{lit: name, ascii: plainASCII(name)}
				for k := range names {
					if names[k].sameFold(&n) {
						prev = names[k].lit
						break
					}
				}
				names = append(names, n)
			}
			if prev != nil {
				return 0, fmt.Errorf("member names %q and %q differ only in case; servers read them differently", jsonrpc.Unquote(prev), jsonrpc.Unquote(name))
			}
			end, err := collisionsIn(b, jsonrpc.SkipSpace(b, jsonrpc.SkipSpace(b, keyEnd)+1))
			if err != nil {
				return 0, err
			}
			if i = jsonrpc.SkipSpace(b, end); b[i] == ',' {
				i = jsonrpc.SkipSpace(b, i+1)
			}
		}
		return i + 1, nil
	}
	return jsonrpc.EndOfValue(b, i), nil
}

// seenName is a member name met in an object (a string literal), with its fold worked out
// once, when first needed: it is compared with each of up to 15 others, and unquoting and
// folding a long name at every comparison cost 15 times the work (16 names of 500 KB of "é"
// took 1.7 s for an 8 MB request).
type seenName struct {
	lit   []byte
	ascii bool // plainASCII(lit)
	fold  string
	done  bool // fold is set
}

func (n *seenName) folded() string {
	if !n.done {
		n.fold, n.done = foldKey(jsonrpc.Unquote(n.lit)), true
	}
	return n.fold
}

// sameFold says whether two member names (string literals) fold alike (foldKey).
func sameFold(a, b []byte) bool {
	n, o := seenName{lit: a, ascii: plainASCII(a)}, seenName{lit: b, ascii: plainASCII(b)}
	return n.sameFold(&o)
}

// sameFold says whether two member names fold alike, folding each at most once.
func (n *seenName) sameFold(o *seenName) bool {
	a, b := n.lit, o.lit
	if n.ascii && o.ascii {
		if len(a) != len(b) {
			return false
		}
		for k := range a {
			x, y := a[k], b[k]
			if 'a' <= x && x <= 'z' {
				x -= 'a' - 'A'
			}
			if 'a' <= y && y <= 'z' {
				y -= 'a' - 'A'
			}
			if x != y {
				return false
			}
		}
		return true
	}
	return n.folded() == o.folded()
}

// plainASCII says whether a string literal is ASCII without escapes (its bytes are its runes).
func plainASCII(lit []byte) bool {
	for _, c := range lit {
		if c >= utf8.RuneSelf || c == '\\' {
			return false
		}
	}
	return true
}

// foldKey maps every rune of s to the smallest rune of its Unicode simple case-folding orbit,
// so names that any case-insensitive matcher takes for each other fold alike ("K", "k" and
// the Kelvin sign; "s", "S" and "ſ"). For ASCII that is the upper case letter.
func foldKey(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf || 'a' <= s[i] && s[i] <= 'z' {
			ascii = false
			break
		}
	}
	if ascii {
		return s // nothing to fold
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		m := r
		if r < utf8.RuneSelf {
			if 'a' <= r && r <= 'z' {
				m = r - 'a' + 'A'
			}
		} else {
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				m = min(m, f)
			}
		}
		b.WriteRune(m)
	}
	return b.String()
}

// withArguments returns the params with the "arguments" value replaced by args; every other
// byte is kept as received.
func (c call) withArguments(args []byte) json.RawMessage {
	var b []byte
	if c.argsEnd == 0 {
		// No "arguments" member: add one right after the opening brace.
		b = append(b, '{')
		b = append(b, `"arguments":`...)
		b = append(b, args...)
		rest := bytes.TrimSpace(c.params[1:])
		if len(rest) > 0 && rest[0] != '}' {
			b = append(b, ',')
		}
		return append(b, c.params[1:]...)
	}
	b = append(b, c.params[:c.argsStart]...)
	b = append(b, args...)
	return append(b, c.params[c.argsEnd:]...)
}
