package wrap

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/effectfence/effectfence/pkg/canon"
)

// call is a tools/call request decoded strictly: exactly as every server reads it, or refused.
type call struct {
	name string
	args []byte // the "arguments" member exactly as received; {} when absent or null
	// argsStart and argsEnd delimit the "arguments" value in the params (both 0 when absent),
	// so an injected key is spliced in and every other byte is forwarded as received.
	argsStart, argsEnd int
	params             json.RawMessage
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
	if _, err := canon.JSON(params); err != nil { // duplicates at any depth, UTF-8, surrogates
		return c, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "canon: "))
	}
	if err := caseCollisions(params); err != nil {
		return c, err
	}
	d := json.NewDecoder(bytes.NewReader(params))
	if _, err := d.Token(); err != nil { // {
		return c, err
	}
	seenName := false
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return c, err
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return c, err
		}
		end := int(d.InputOffset())
		switch key {
		case "name":
			if err := json.Unmarshal(raw, &c.name); err != nil || c.name == "" {
				return c, fmt.Errorf(`"name" must be a non-empty string`)
			}
			seenName = true
		case "arguments":
			if raw[0] != '{' && string(raw) != "null" {
				return c, fmt.Errorf(`"arguments" must be an object`)
			}
			c.args, c.argsStart, c.argsEnd = raw, end-len(raw), end
		case "task":
			c.task = string(raw) != "null"
		}
	}
	if !seenName {
		return c, fmt.Errorf(`"name" is missing`)
	}
	if len(c.args) == 0 || string(c.args) == "null" {
		c.args = []byte("{}") // no arguments and {} are the same call
	}
	return c, nil
}

// caseCollisions refuses an object with two member names equal but for case at any depth:
// a case-insensitive reader (Go's encoding/json) would take one for the other.
func caseCollisions(raw []byte) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	type frame struct {
		object bool
		key    bool // the next token in this object is a member name
		seen   map[string]string
	}
	var stack []*frame
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if k, ok := tok.(string); ok {
				fold := foldKey(k)
				if prev, dup := top.seen[fold]; dup {
					return fmt.Errorf("member names %q and %q differ only in case; servers read them differently", prev, k)
				}
				top.seen[fold] = k
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			if top != nil && top.object {
				top.key = true
			}
			stack = append(stack, &frame{object: true, key: true, seen: map[string]string{}})
			continue
		case json.Delim('['):
			if top != nil && top.object {
				top.key = true
			}
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			continue
		}
		if top != nil && top.object {
			top.key = true
		}
	}
}

// foldKey maps every rune of s to the smallest rune of its Unicode simple case-folding orbit,
// so names that any case-insensitive matcher takes for each other fold alike ("K", "k" and
// the Kelvin sign; "s", "S" and "ſ").
func foldKey(s string) string {
	var b strings.Builder
	for _, r := range s {
		m := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			m = min(m, f)
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
