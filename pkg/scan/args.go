package scan

import (
	"regexp"
	"strings"
)

// arg is one top-level argument of a call, as far as a scanner can tell without parsing.
type arg struct {
	kw    string // keyword for name="x", name: "x", name = "x"
	str   string // the string literal, when the argument is one
	isStr bool
	ident string // an identifier or dotted reference (GitTools.STATUS), when it is one
}

var (
	identRe    = regexp.MustCompile(`^[A-Za-z_$][\w$]*(?:(?:\.|::)[A-Za-z_$][\w$]*)*`)
	kwRe       = regexp.MustCompile(`^([A-Za-z_]\w*)\s*(?:=|:)[^=:>]`)
	toolNameRe = regexp.MustCompile(`^[A-Za-z0-9_][\w\-./:]{0,99}$`)
)

// parseArgs reads up to max top-level arguments of the call whose '(' is at open.
func (s *source) parseArgs(open, max int) []arg {
	end := s.matchClose(open)
	if end < 0 {
		end = len(s.text)
		if end > open+4000 {
			end = open + 4000
		}
	}
	var out []arg
	i := open + 1
	for len(out) < max && i < end {
		i = skipSpace(s.text, i, end)
		if i >= end {
			break
		}
		var a arg
		if m := kwRe.FindSubmatch(s.text[i:min(end+1, i+64, len(s.text))]); m != nil && s.text[i+len(m[0])-1] != ':' {
			a.kw = string(m[1])
			i += len(m[0]) - 1
			i = skipSpace(s.text, i, end)
		}
		if i < end {
			c := s.text[i]
			switch {
			case c == '"' || c == '\'' || c == '`':
				j := s.skipString(i)
				if j > i+1 && j <= end {
					a.str, a.isStr = string(s.text[i+1:j-1]), true
					i = j
				}
			default:
				if m := identRe.Find(s.text[i:end]); m != nil {
					a.ident = string(m)
					i += len(m)
					// string(ToolEcho), str(Tools.ECHO): a conversion of a constant
					if conversions[a.ident] && i < end && s.text[i] == '(' {
						if c := s.matchClose(i); c > 0 {
							inner := identRe.Find(s.text[i+1 : c])
							if inner != nil && i+1+len(inner) == c {
								a.ident = string(inner)
								i = c + 1
							}
						}
					}
				}
			}
		}
		// skip the rest of this argument up to the next top-level comma; anything more than
		// the literal or identifier (a call, a concatenation) makes it unknown
		complex := false
		for i < end {
			if j := s.skipString(i); j != i {
				complex = true
				i = j
				continue
			}
			c := s.text[i]
			if c == ',' {
				i++
				break
			}
			if c == '(' || c == '[' || c == '{' {
				complex = true
				if k := s.matchClose(i); k > 0 {
					i = k + 1
					continue
				}
			}
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
				complex = true
			}
			i++
		}
		if complex {
			a.str, a.isStr, a.ident = "", false, ""
		}
		out = append(out, a)
	}
	return out
}

func skipSpace(t []byte, i, end int) int {
	for i < end && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r') {
		i++
	}
	return i
}

var conversions = map[string]bool{"string": true, "str": true, "String": true}

// nameFromArgs picks the tool name out of a call's arguments: a name=/name:/tool_name
// keyword first, then the first positional string literal, then the first positional
// identifier that is not the server or context being registered on.
func nameFromArgs(args []arg) (name, ref string) {
	for _, a := range args {
		if a.kw == "name" || a.kw == "tool_name" || a.kw == "method" || a.kw == "Name" {
			if a.isStr {
				return a.str, ""
			}
			if a.ident != "" {
				return "", a.ident
			}
		}
	}
	for i, a := range args {
		if a.kw != "" {
			continue
		}
		if a.isStr {
			return a.str, ""
		}
		if a.ident != "" && !receiverLike(a.ident) {
			return "", a.ident
		}
		if i >= 1 || a.ident == "" {
			// NewServerTool(tp.GetTasks(), tp.HandleGetTasks): after an expression, the next
			// identifier is a handler, not a name
			break
		}
	}
	return "", ""
}

// receiverLike reports whether an identifier passed first to a register call is the server
// or context (registerPaidTool(server, "name", ...)) rather than the tool's name.
func receiverLike(id string) bool {
	for _, w := range splitWords(id) {
		switch w {
		case "server", "srv", "mcp", "app", "ctx", "context", "this", "self", "s", "router", "registry":
			return true
		}
	}
	return false
}

// constantLike reports whether an unresolved reference looks like a named constant, which
// is worth reporting under its own words, rather than a run-time parameter.
func constantLike(ref string) bool {
	if strings.ContainsAny(ref, ".:") {
		return true
	}
	return ref != "" && ref[0] >= 'A' && ref[0] <= 'Z'
}

func validToolName(n string) bool { return toolNameRe.MatchString(n) }
