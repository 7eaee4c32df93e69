package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"

	"github.com/effectfence/effectfence/internal/userfile"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/httpback"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/postgres"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// The keys the parser accepts at each level (the schema test holds docs/policy.schema.json to
// exactly these).
var (
	serverKeys   = []string{"version", "scope", "ledger", "fence_reads", "defaults", "tools", "on_unknown"}
	toolKeys     = []string{"fence", "key", "ignore", "replay_window", "rerun_safe", "redact", "result", "wait", "elicit"}
	defaultsKeys = []string{"ignore", "replay_window", "rerun_safe", "redact", "result", "wait", "elicit"}
	hookKeys     = []string{"command", "url", "retries", "timeout"}
)

// Bounds of the durations and numbers a policy sets. The replay window is bounded like the
// result TTL it cannot outlive, the wait like a lease (a duplicate waiting longer than the
// longest lease waits for nothing); a hook is retried a few times within minutes, never long
// enough to look like the agent's problem.
const (
	minReplayWindow = wrap.MinReplayWindow
	maxReplayWindow = wrap.MaxReplayWindow
	minWait         = time.Millisecond
	maxWait         = store.MaxLeaseSeconds * time.Second
	minHookTimeout  = time.Second
	maxHookTimeout  = 10 * time.Minute
	maxHookRetries  = 10
)

// Load reads and checks the policy file at path. A relative ledger path in the file, and an
// on_unknown program written with a relative path (./hooks/notify), are taken from the file's
// directory, so the file means the same wherever wrap is started.
func Load(path string) (*Policy, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	p, err := Parse(path, b)
	if err != nil {
		return nil, err
	}
	if p.Ledger != "" && p.Ledger != "memory" && !strings.Contains(p.Ledger, "://") && !filepath.IsAbs(p.Ledger) {
		p.Ledger = beside(path, p.Ledger)
	}
	if h := p.OnUnknown; h != nil && len(h.Command) > 0 {
		// A bare name ("notify-oncall") is looked up in PATH; one with a separator is a path.
		if prog := h.Command[0]; !filepath.IsAbs(prog) && strings.ContainsAny(prog, "/"+string(filepath.Separator)) {
			h.Command[0] = beside(path, prog)
		}
	}
	return p, nil
}

// beside is the relative path rel taken from the directory of the policy file at path, and
// still written as a path when that directory is the working directory: filepath.Join cleans
// a leading "./" away, and with --policy policy.yaml (an MCP config's usual form) `ledger:
// ./memory`, a SQLite file named memory, became "memory", a ledger in wrap's memory whose
// receipts a restart lost (the call ran again); `ledger: ./a:b.db` became "a:b.db", which
// wrap refused as a URL scheme after `policy check` had passed the file; and `command:
// [./notify]` became "notify", looked up in PATH instead of the script beside the policy.
func beside(path, rel string) string {
	p := filepath.Join(filepath.Dir(path), rel)
	if filepath.IsAbs(p) || filepath.VolumeName(p) != "" {
		return p
	}
	return "." + string(filepath.Separator) + p
}

// MaxFileSize bounds a policy file: one reviewed file of settings, thousands of tools long at
// most. Its YAML parser holds about 300 bytes per byte of the file, so an unbounded read (a
// 100 MB file, /dev/zero) took gigabytes and minutes before any error.
const MaxFileSize = 1 << 20

// readFile reads a policy file of at most MaxFileSize bytes.
func readFile(path string) ([]byte, error) {
	f, err := userfile.Open(path) // a named pipe nothing writes to reads as empty, not for ever
	if err != nil {
		return nil, Errors{{File: path, Msg: fmt.Sprintf("cannot read the policy file: %v", errors.Unwrap(err))}}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, Errors{{File: path, Msg: fmt.Sprintf("cannot read the policy file: %v", errors.Unwrap(err))}}
	}
	if len(b) > MaxFileSize {
		return nil, Errors{{File: path, Msg: "the file is larger than 1 MiB, which no policy needs; is it the right file?"}}
	}
	return b, nil
}

// Parse checks a policy file's text; name is used in messages. The error, if any, is Errors.
func Parse(name string, src []byte) (*Policy, error) {
	ps := &parse{file: name}
	pol := &Policy{File: name}
	src = bytes.TrimPrefix(src, []byte("\ufeff")) // YAML allows a byte-order mark before the stream
	// YAML reads a CRLF as one line break, as LF; the parser counted a comment's CR and LF as
	// two lines, so every error below a comment of a CRLF file pointed to a later line.
	src = bytes.ReplaceAll(src, []byte("\r\n"), []byte("\n"))
	if line, col := notUTF8(src); line > 0 {
		return nil, Errors{{File: name, Line: line, Column: col, Msg: "the file is not UTF-8 text (YAML is Unicode, and a tool name so written could never equal one an agent sends); save it as UTF-8"}}
	}
	if line, col, r := invisible(src); line > 0 && unicode.IsControl(r) {
		return nil, Errors{{File: name, Line: line, Column: col, Msg: fmt.Sprintf("the file holds U+%04X, a control character: YAML does not allow it written as itself, and a terminal acts on it instead of showing it (a reviewer would not see it, or would see the line rewritten); remove it, or write it as an escape (%s) in a double-quoted string", r, escape(r))}}
	} else if line > 0 {
		what := "an invisible format character"
		if !unicode.Is(unicode.Cf, r) {
			what = "an invisible character (Unicode draws it as nothing)"
		}
		return nil, Errors{{File: name, Line: line, Column: col, Msg: fmt.Sprintf("the file holds U+%04X, %s: a reviewer would not see it (in a tool's name the entry names another tool than the one shown) or would see the line reordered; remove it, or write it as an escape (%s) in a double-quoted string", r, what, escape(r))}}
	}
	if i := bytes.IndexByte(src, '\r'); i >= 0 {
		// Left alone by the CRLF above: a carriage return not followed by a line feed. YAML
		// breaks the line there; a terminal (cat, less -r, a diff) returns to the line's start
		// and draws what follows over it, so `pass: [charge]<CR># note` showed as a comment.
		line, col := position(src, i)
		return nil, Errors{{File: name, Line: line, Column: col, Msg: "a carriage return (CR) not followed by a line feed: YAML starts a new line there, but a terminal draws the rest over the start of the line, so a reviewer would not see what it hides; save the file with LF or CRLF line ends"}}
	}
	if i := bytes.IndexAny(src, "\u2028\u2029"); i >= 0 {
		// The line and paragraph separators: YAML 1.2 reads them as text, so the parser took
		// the rest of the line for part of what went before (a comment, a value), while YAML
		// 1.1 parsers (PyYAML, a linter in CI) and a Unicode text renderer (a browser, a code
		// review page: UAX #14 makes each a mandatory line break) start a new line there.
		// `# note<U+2028>    redact: [card.number]` showed a redact that was part of the
		// comment, and the card number was kept in the ledger in clear (before 2026-12-07).
		line, col := position(src, i)
		r, _ := utf8.DecodeRune(src[i:])
		return nil, Errors{{File: name, Line: line, Column: col, Msg: fmt.Sprintf("the file holds U+%04X, a line or paragraph separator: this parser reads it as text (what follows it on the line is part of what precedes it, a comment say), but many viewers and YAML 1.1 tools start a new line there, so a reviewer would see a line the policy does not have; break the line with a line feed, or write it as an escape (%s) in a double-quoted string", r, escape(r))}}
	}
	if line, col := tooDeep(src); line > 0 {
		return nil, Errors{{File: name, Line: line, Column: col, Msg: fmt.Sprintf("collections nested more than %d deep; a policy needs a few levels", maxDepth)}}
	}
	f, err := parser.ParseBytes(src, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		var ye interface {
			GetToken() *token.Token
			GetMessage() string
		}
		if errors.As(err, &ye) && ye.GetToken() != nil {
			pos := ye.GetToken().Position
			return nil, Errors{{File: name, Line: pos.Line, Column: pos.Column, Msg: "YAML: " + ye.GetMessage()}}
		}
		return nil, Errors{{File: name, Msg: "YAML: " + err.Error()}}
	}
	var docs []*ast.DocumentNode
	for _, d := range f.Docs {
		if dn, ok := d.Body.(*ast.DirectiveNode); ok {
			ps.errorf(dn, "YAML directives (%%YAML, %%TAG) are not supported in a policy file; remove the line")
			continue
		}
		if d.Body != nil && d.Body.Type() != ast.CommentType {
			docs = append(docs, d)
		}
	}
	switch {
	case len(docs) == 0:
		return nil, Errors{{File: name, Msg: fmt.Sprintf("the file is empty; a policy starts with `version: %d`", Version)}}
	case len(docs) > 1:
		ps.errorf(docs[1].Body, "a policy file holds one YAML document; this is a second one")
	}
	ps.server(docs[0].Body, pol)
	if len(ps.errs) > 0 {
		slices.SortStableFunc(ps.errs, func(a, b Error) int {
			if a.Line != b.Line {
				return a.Line - b.Line
			}
			return a.Column - b.Column
		})
		return nil, ps.errs
	}
	return pol, nil
}

// notUTF8 returns the line and column (in characters) of the first byte of src that is not
// UTF-8, or 0, 0.
func notUTF8(src []byte) (line, col int) {
	line, col = 1, 1
	for i := 0; i < len(src); {
		r, w := utf8.DecodeRune(src[i:])
		if r == utf8.RuneError && w == 1 {
			return line, col
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += w
	}
	return 0, 0
}

// position is the line and column (in characters) of byte i of src, lines ended by LF.
func position(src []byte, i int) (line, col int) {
	before := src[:i]
	line = bytes.Count(before, []byte("\n")) + 1
	return line, utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
}

// invisible returns the line and column (in characters) of the first Unicode format character
// (category Cf: zero-width spaces and joiners, bidirectional overrides and isolates, soft
// hyphens, tag characters, a byte-order mark past the start) or control character other than
// tab and line breaks (category Cc: NUL, escape, backspace, DEL, C1) written as itself in src,
// and that character, or 0, 0, 0. A policy is reviewed like code: such a character either
// cannot be seen or changes how the text around it is shown (CVE-2021-42574, "Trojan
// Source"; an escape sequence rewrites a terminal's line). YAML forbids the control
// characters, but the parser read them as text.
//
// The other characters Unicode says are drawn as nothing (default-ignorable) count too: the
// combining grapheme joiner U+034F, the Hangul fillers (U+115F, U+1160, U+3164, U+FFA0), and a
// variation selector that follows an ASCII character or starts a line (after an emoji or a
// CJK character it picks how that character is drawn, and is taken as written). Before
// 2026-12-06 they were accepted, so `ignore: [meta.ts<U+3164>]` read as `[meta.ts]` and
// ignored nothing.
func invisible(src []byte) (line, col int, r rune) {
	line, col = 1, 1
	prev := '\n'
	for _, r := range string(src) {
		switch {
		case hidden(r, prev), unicode.IsControl(r) && r != '\t' && r != '\n' && r != '\r':
			return line, col, r
		case r == '\n':
			line, col = line+1, 1
		default:
			col++
		}
		prev = r
	}
	return 0, 0, 0
}

// hidden reports whether r, following prev, is drawn as nothing: a format character, another
// default-ignorable code point, or a variation selector with nothing it could select for
// (after ASCII, or at a line's start).
func hidden(r, prev rune) bool {
	switch {
	case r < 0xad:
		return false
	case unicode.Is(unicode.Variation_Selector, r):
		return prev < utf8.RuneSelf
	}
	return unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r)
}

// escape writes r as a YAML double-quoted escape.
func escape(r rune) string {
	if r > 0xFFFF {
		return fmt.Sprintf("\\U%08X", r)
	}
	return fmt.Sprintf("\\u%04X", r)
}

// maxDepth bounds how deeply a policy's collections nest (see tooDeep).
const maxDepth = 100

// tooDeep returns the line and column (in characters) at which src's collections nest deeper
// than maxDepth, or 0, 0. The YAML parser's memory grows with the square of the depth, and
// within MaxFileSize the depth is bounded by indentation except where nothing is indented:
// flow collections ([ and {, across lines) and block indicators ("- ", "? ", ": ") on one
// line, which are counted here. Comments and quoted scalars are skipped; what a plain or block
// scalar holds may count, so the bound is far above what a policy uses.
func tooDeep(src []byte) (line, col int) {
	line = 1
	flow, block := 0, 0
	prev := byte('\n')
	for i := 0; i < len(src); i++ {
		c := src[i]
		if c&0xC0 != 0x80 { // not a UTF-8 continuation byte
			col++
		}
		switch {
		case c == '\n':
			line, col, block = line+1, 0, 0
		case c == '#' && (prev == ' ' || prev == '\t' || prev == '\n'):
			for i+1 < len(src) && src[i+1] != '\n' {
				i++
			}
		case (c == '"' || c == '\'') && strings.IndexByte(" \t\n[{,:-?", prev) >= 0:
			for i++; i < len(src); i++ {
				switch b := src[i]; {
				case b == '\n':
					line, col = line+1, 0
				case b&0xC0 != 0x80:
					col++
				}
				if c == '"' && src[i] == '\\' && i+1 < len(src) && src[i+1] != '\n' {
					i++
					col++
				} else if src[i] == c {
					if c == '\'' && i+1 < len(src) && src[i+1] == '\'' {
						i++
						col++
						continue
					}
					break
				}
			}
		case c == '[' || c == '{':
			flow++
		case c == ']' || c == '}':
			flow = max(flow-1, 0)
		case (c == '-' || c == '?' || c == ':') && (i+1 == len(src) || src[i+1] == ' ' || src[i+1] == '\t' || src[i+1] == '\n'):
			block++
		}
		if flow+block > maxDepth {
			return line, col
		}
		prev = c
	}
	return 0, 0
}

// text returns the string a scalar holds: plain, quoted, or a block scalar (| or >).
func text(n ast.Node) (string, bool) {
	switch s := n.(type) {
	case *ast.StringNode:
		return s.Value, true
	case *ast.LiteralNode:
		return s.Value.Value, true
	}
	return "", false
}

// parse collects the errors of one file.
type parse struct {
	file string
	errs Errors
}

func (ps *parse) errorf(n ast.Node, format string, a ...any) {
	// A block mapping's token is its first ':'; point at its first key instead.
	switch m := n.(type) {
	case *ast.MappingNode:
		if len(m.Values) > 0 && !m.IsFlowStyle {
			n = m.Values[0].Key
		}
	case *ast.MappingValueNode:
		n = m.Key
	}
	pos := n.GetToken().Position
	ps.errs = append(ps.errs, Error{File: ps.file, Line: pos.Line, Column: pos.Column, Msg: fmt.Sprintf(format, a...)})
}

// member is one key: value of a mapping.
type member struct {
	key   string
	keyN  ast.Node
	value ast.Node
}

// mapping returns the members of a mapping node, refusing other nodes, non-scalar keys and
// duplicate keys (what names the mapping in messages).
func (ps *parse) mapping(n ast.Node, what string) ([]member, bool) {
	var pairs []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		pairs = m.Values
	case *ast.MappingValueNode:
		pairs = []*ast.MappingValueNode{m}
	default:
		ps.notPlain(n, what+" must be a mapping of keys to values")
		return nil, false
	}
	var out []member
	seen := map[string]ast.Node{}
	for _, mv := range pairs {
		key, ok := ps.keyName(mv.Key)
		if !ok {
			continue
		}
		if first, dup := seen[key]; dup {
			pos := first.GetToken().Position
			ps.errorf(mv.Key, "%q is given twice in %s (first at line %d, column %d)", key, what, pos.Line, pos.Column)
			continue
		}
		seen[key] = mv.Key
		out = append(out, member{key: key, keyN: mv.Key, value: mv.Value})
	}
	return out, true
}

func (ps *parse) keyName(n ast.Node) (string, bool) {
	switch k := n.(type) {
	case *ast.StringNode:
		return k.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode:
		return k.GetToken().Value, true
	case *ast.MergeKeyNode:
		ps.errorf(n, "merge keys (<<) are not supported in a policy file; put shared settings under defaults")
		return "", false
	}
	ps.errorf(n, "a key must be a plain name")
	return "", false
}

// notPlain reports a node that is not of the expected kind, naming anchors, aliases and tags
// specially since they are YAML features a policy does not use.
func (ps *parse) notPlain(n ast.Node, msg string) {
	switch n.(type) {
	case *ast.AnchorNode, *ast.AliasNode:
		ps.errorf(n, "anchors and aliases are not supported in a policy file; put shared settings under defaults")
	case *ast.TagNode:
		ps.errorf(n, "YAML tags are not supported in a policy file")
	default:
		ps.errorf(n, "%s, not %s", msg, kind(n))
	}
}

// kind names a node's type for messages.
func kind(n ast.Node) string {
	switch n.(type) {
	case *ast.NullNode:
		return "an empty value"
	case *ast.StringNode, *ast.LiteralNode:
		return "a string"
	case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "a number"
	case *ast.BoolNode:
		return "true/false"
	case *ast.SequenceNode:
		return "a list"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	}
	return "that"
}

func (ps *parse) unknownKey(m member, where string, known []string) {
	ps.errorf(m.keyN, "unknown key %q in %s; known keys: %s", m.key, where, strings.Join(known, ", "))
}

func (ps *parse) server(n ast.Node, pol *Policy) {
	members, ok := ps.mapping(n, "the policy")
	if !ok {
		return
	}
	sawVersion := false
	for _, m := range members {
		switch m.key {
		case "version":
			sawVersion = true
			if v, ok := m.value.(*ast.IntegerNode); !ok || v.GetToken().Value != strconv.Itoa(Version) {
				ps.errorf(m.value, "version must be %d (the only policy format this effectfence reads)", Version)
			}
		case "scope":
			if s, ok := ps.str(m.value, "scope"); ok {
				if strings.TrimSpace(s) != s || s == "" || strings.IndexFunc(s, unicode.IsControl) >= 0 {
					ps.errorf(m.value, "scope %q: want a non-empty name without control characters or surrounding space", s)
				}
				pol.Scope = s
			}
		case "ledger":
			if s, ok := ps.str(m.value, "ledger"); ok {
				ps.ledger(m.value, s)
				pol.Ledger = s
			}
		case "fence_reads":
			pol.FenceReads = ps.boolean(m.value, "fence_reads")
		case "defaults":
			ps.tool(m.value, "defaults", defaultsKeys, &pol.Defaults)
		case "tools":
			ps.tools(m.value, pol)
		case "on_unknown":
			pol.OnUnknown = ps.hook(m.value)
		default:
			ps.unknownKey(m, "the policy", serverKeys)
		}
	}
	if !sawVersion {
		ps.errorf(n, "the policy does not say `version: %d` (first line)", Version)
	}
	for _, e := range pol.Tools {
		if e.Ignore != nil {
			continue // the entry's own ignore replaces the defaults'
		}
		if k, i, cut := wrap.IgnoredKey(e.Key, pol.Defaults.Ignore); cut {
			ps.errs = append(ps.errs, Error{File: ps.file, Line: e.Line, Column: e.Column, Msg: fmt.Sprintf("tool %q: %v (in defaults)", e.Pattern, wrap.IgnoredKeyError(k, i))})
		}
	}
	// A tool's redact paths are the defaults' and its entry's together, and go into each of
	// its calls' fence requests, which take at most fence.MaxRedactPaths (a list longer on its
	// own is refused where it is).
	for _, e := range pol.Tools {
		if n := len(union(pol.Defaults.Redact, e.Redact)); n > fence.MaxRedactPaths && len(e.Redact) <= fence.MaxRedactPaths && len(pol.Defaults.Redact) <= fence.MaxRedactPaths {
			ps.errs = append(ps.errs, Error{File: ps.file, Line: e.Line, Column: e.Column, Msg: fmt.Sprintf("tool %q: redact names %d paths with those of defaults; a call's redact paths are at most %d (every call of the tool would be refused, NOT executed)", e.Pattern, n, fence.MaxRedactPaths)})
		}
	}
}

func (ps *parse) ledger(n ast.Node, s string) {
	if s == "" {
		ps.errorf(n, "ledger is empty; leave it out for the default ledger")
		return
	}
	if err := store.CheckLedger(s); err != nil {
		ps.errorf(n, "%v", err)
		return
	}
	switch postgres.Secret(s) {
	case "password":
		ps.errorf(n, "the ledger URL holds a password, which would be committed with this file; give it in PGPASSWORD or ~/.pgpass instead")
	case "sslpassword":
		ps.errorf(n, "the ledger URL holds sslpassword (the client key's passphrase), which would be committed with this file; give it in PGSSLPASSWORD instead")
	}
}

func (ps *parse) tools(n ast.Node, pol *Policy) {
	members, ok := ps.mapping(n, "tools")
	if !ok {
		return
	}
	for _, m := range members {
		e := Entry{Pattern: m.key}
		pos := m.keyN.GetToken().Position
		e.Line, e.Column = pos.Line, pos.Column
		if err := checkPattern(m.key); err != nil {
			ps.errorf(m.keyN, "tool %q: %v", m.key, err)
			continue
		}
		ps.tool(m.value, fmt.Sprintf("tool %q", m.key), toolKeys, &e.ToolPolicy)
		pol.Tools = append(pol.Tools, e)
	}
	ps.overlaps(pol.Tools)
}

// overlaps refuses two globs of equal specificity that can match the same name: which one
// applies would otherwise depend on file order. Only globs of one specificity are compared,
// and a pair whose literal prefixes or suffixes differ is told apart without intersect: every
// pair of entries compared with intersect, 38,000 globs of a 1 MiB file took 4 minutes. Each
// glob is reported once, with the first earlier glob it clashes with: 4,000 globs that all
// clash ("*0000*", "*0001*", …) made 8 million errors and 14 GB of allocation.
func (ps *parse) overlaps(es []Entry) {
	type glob struct {
		e        *Entry
		pre, suf string // the literal characters before the first and after the last wildcard
	}
	bySpec := map[int][]glob{}
	for i := range es {
		a := &es[i]
		if !a.Glob() {
			continue
		}
		n := specificity(a.Pattern)
		g := glob{e: a, pre: a.Pattern[:strings.IndexAny(a.Pattern, "*?")], suf: a.Pattern[strings.LastIndexAny(a.Pattern, "*?")+1:]}
		for _, b := range bySpec[n] {
			if !prefixed(g.pre, b.pre) || !suffixed(g.suf, b.suf) || !intersect(a.Pattern, b.e.Pattern) {
				continue
			}
			ps.errs = append(ps.errs, Error{File: ps.file, Line: a.Line, Column: a.Column, Msg: fmt.Sprintf(
				"globs %q and %q (line %d) can match the same tool and are equally specific (%d literal characters); name the tool exactly or make one glob more specific",
				a.Pattern, b.e.Pattern, b.e.Line, n)})
			break // one clash per glob: every clashing pair of n globs was n²/2 errors
		}
		bySpec[n] = append(bySpec[n], g)
	}
}

// prefixed reports whether one of a and b begins the other; suffixed, ends it.
func prefixed(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }
func suffixed(a, b string) bool { return strings.HasSuffix(a, b) || strings.HasSuffix(b, a) }

func (ps *parse) tool(n ast.Node, where string, known []string, tp *ToolPolicy) {
	members, ok := ps.mapping(n, where)
	if !ok {
		return
	}
	var passN, keyN ast.Node
	var others []member
	for _, m := range members {
		what := m.key
		switch m.key {
		case "fence":
			if !slices.Contains(known, m.key) {
				ps.errorf(m.keyN, "\"fence\" cannot be in defaults: tools are fenced unless annotated readOnlyHint; say fence_reads: true to fence those too, or fence per tool")
				continue
			}
			tp.Fence = ps.boolean(m.value, what)
			if tp.Fence != nil && !*tp.Fence {
				passN = m.keyN
			}
			continue
		case "key", "ignore", "replay_window", "rerun_safe", "redact", "result", "wait", "elicit":
			if !slices.Contains(known, m.key) {
				ps.errorf(m.keyN, "%q cannot be in %s: it names fields of one tool, so it belongs to that tool's entry", m.key, where)
				continue
			}
		default:
			ps.unknownKey(m, where, known)
			continue
		}
		if m.key != "redact" && m.key != "wait" {
			// Two settings have an effect on a tool that passes through too: redact's values
			// are kept out of the server's stderr that wrap records (docs/privacy.md), and
			// wait bounds how long its calls wait for the server's tool listing after a
			// restart or a list_changed (docs/wrap.md; before 2026-12-07 evening it was
			// refused here as having no effect, though wrap applied it).
			others = append(others, m)
		}
		switch m.key {
		case "key":
			tp.Key, keyN = ps.paths(m.value, what, false), m.keyN
		case "ignore":
			tp.Ignore = ps.paths(m.value, what, true)
			if tp.Ignore == nil && !ps.isNull(m.value) {
				tp.Ignore = []wrap.Path{}
			}
		case "replay_window":
			tp.ReplayWindow = ps.duration(m.value, what, minReplayWindow, maxReplayWindow)
		case "rerun_safe":
			tp.RerunSafe = ps.boolean(m.value, what)
		case "redact":
			tp.Redact = ps.redact(m.value)
		case "result":
			tp.Result = ps.result(m.value)
		case "wait":
			tp.Wait = ps.duration(m.value, what, minWait, maxWait)
		case "elicit":
			tp.Elicit = ps.boolean(m.value, what)
		}
	}
	if k, i, cut := wrap.IgnoredKey(tp.Key, tp.Ignore); cut {
		ps.errorf(keyN, "%s: %v", where, wrap.IgnoredKeyError(k, i))
	}
	if passN != nil && len(others) > 0 {
		ps.errorf(others[0].keyN, "%s says fence: false (calls pass through unfenced), so %q has no effect; remove one of them", where, others[0].key)
	}
}

func (ps *parse) isNull(n ast.Node) bool { _, ok := n.(*ast.NullNode); return ok }

func (ps *parse) str(n ast.Node, what string) (string, bool) {
	if s, ok := text(n); ok {
		return s, !ps.fakeComment(n, what, s)
	}
	ps.notPlain(n, what+" must be a string")
	return "", false
}

func (ps *parse) boolean(n ast.Node, what string) *bool {
	if b, ok := n.(*ast.BoolNode); ok {
		v := b.Value
		return &v
	}
	ps.notPlain(n, what+" must be true or false")
	return nil
}

// list returns the string items of a sequence; with fields, of field paths, refusing a path
// with a blank-ended member name (blankEnd).
func (ps *parse) list(n ast.Node, what, example string, fields bool) ([]string, []ast.Node, bool) {
	seq, ok := n.(*ast.SequenceNode)
	if !ok {
		ps.notPlain(n, fmt.Sprintf("%s must be a list such as %s", what, example))
		return nil, nil, false
	}
	var out []string
	var nodes []ast.Node
	good := true
	for _, it := range seq.Values {
		s, ok := text(it)
		if !ok {
			ps.notPlain(it, what+" items must be strings")
			good = false
			continue
		}
		if ps.fakeComment(it, what, s) {
			good = false
			continue
		}
		if fields && blankEnd(s) {
			ps.errorf(it, "%s: %q has a member name that begins or ends with a blank (white space or U+2800): written as itself it looks like the space YAML drops, so the path would name another field than the one a reviewer sees; take it out", what, s)
			good = false
			continue
		}
		out = append(out, s)
		nodes = append(nodes, it)
	}
	return out, nodes, good
}

// fakeComment reports, as an error, a blank other than a space or a tab right before a '#' in
// the plain (unquoted) scalar n, whose text is s: a reviewer reads the '#' as the start of a
// comment, but only a space or a tab starts one, so the '#' and what follows are part of the
// value. Before 2026-12-07 `- card.number<U+00A0># the PAN` named the member
// "number<U+00A0># the PAN", passed `policy check`, and the card number was kept in the ledger
// in clear (TestBlankBeforeHashRefused).
func (ps *parse) fakeComment(n ast.Node, what, s string) bool {
	if n.GetToken() == nil || n.GetToken().Type != token.StringType {
		return false // quoted: the '#' is seen to be inside the value
	}
	prev, at := rune(0), 0
	for _, r := range s {
		if r == '#' && prev != ' ' && prev != '\t' && (unicode.IsSpace(prev) || prev == '\u2800') {
			tok := n.GetToken()
			pos, col := tok.Position, tok.Position.Column
			if !strings.ContainsAny(strings.TrimSpace(tok.Origin), "\r\n") { // one line: point at the blank
				col += at - 1
			}
			ps.errs = append(ps.errs, Error{File: ps.file, Line: pos.Line, Column: col, Msg: fmt.Sprintf(
				"%s: %q has U+%04X before '#': it reads as the start of a comment, but only a space or a tab starts one, so the '#' and what follows are part of the value; write a space there, or quote the value if the '#' belongs to it",
				what, s, prev)})
			return true
		}
		prev = r
		at++
	}
	return false
}

// blankEnd reports whether a member name of the dotted field path s begins or ends with white
// space or the braille blank U+2800, all drawn as a space or as nothing. YAML drops the spaces
// around a plain item, not these: before 2026-12-06 `redact: [card.number<U+00A0>]`, shown as
// `[card.number ]`, named a member "card.number\u00a0", passed `policy check` and left the
// card number in the ledger in clear (TestPathsWithBlankEndsRefused).
func blankEnd(s string) bool {
	blank := func(r rune) bool { return unicode.IsSpace(r) || r == '\u2800' }
	for _, seg := range strings.Split(s, ".") {
		if strings.TrimFunc(seg, blank) != seg {
			return true
		}
	}
	return false
}

// paths reads a list of field paths in wrap's --key/--ignore-field syntax: a key's, or with
// ignore an ignore list's, which may be empty and may not cut the repeat argument
// (wrap.IgnoredRepeat).
func (ps *parse) paths(n ast.Node, what string, ignore bool) []wrap.Path {
	items, nodes, ok := ps.list(n, what, "[order_id, customer.id]", true)
	if !ok {
		return nil
	}
	if len(items) == 0 && !ignore {
		ps.errorf(n, "%s is an empty list; leave it out instead", what)
		return nil
	}
	var out []wrap.Path
	for i, s := range items {
		p, err := wrap.ParsePath(s)
		if err == nil && ignore {
			err = wrap.IgnoredRepeat(p)
		}
		if err != nil {
			ps.errorf(nodes[i], "%s: %v", what, err)
			continue
		}
		out = append(out, p)
	}
	return out
}

func (ps *parse) redact(n ast.Node) []string {
	items, nodes, ok := ps.list(n, "redact", "[card.number, card.cvc]", true)
	if !ok {
		return nil
	}
	if len(items) == 0 {
		ps.errorf(n, "redact is an empty list; leave it out instead")
		return nil
	}
	if len(items) > fence.MaxRedactPaths {
		ps.errorf(n, "redact names %d paths; a call's redact paths are at most %d (every call of the tool would be refused, NOT executed)", len(items), fence.MaxRedactPaths)
	}
	for i, s := range items {
		if err := fence.CheckRedactPath(s); err != nil {
			ps.errorf(nodes[i], "redact: %v", err)
		}
	}
	return items
}

func (ps *parse) result(n ast.Node) fence.KeepResult {
	s, ok := text(n)
	switch {
	case !ok:
		ps.notPlain(n, "result must be keep or hash")
	case s == "keep":
		return fence.KeepFull
	case s == "hash":
		return fence.KeepHash
	default:
		ps.errorf(n, "result is %q; want keep (results are replayed to duplicates) or hash (only their SHA-256 is kept)", s)
	}
	return ""
}

func (ps *parse) duration(n ast.Node, what string, min, max time.Duration) time.Duration {
	s, ok := text(n)
	if !ok {
		ps.notPlain(n, what+" must be a duration such as 30s, 10m, 24h or 7d")
		return 0
	}
	d, err := ParseDuration(s)
	if err != nil {
		ps.errorf(n, "%s: %v", what, err)
		return 0
	}
	if d < min || d > max {
		ps.errorf(n, "%s is %s; want from %s to %s", what, s, FormatDuration(min), FormatDuration(max))
		return 0
	}
	return d
}

// ParseReplayWindow reads a replay window as the policy file's replay_window does (ParseDuration,
// from 1s to 366d), so wrap's --replay-window flag takes the same values as the file.
func ParseReplayWindow(s string) (time.Duration, error) {
	d, err := ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d < minReplayWindow || d > maxReplayWindow {
		return 0, fmt.Errorf("%q is out of range; want from %s to %s", s, FormatDuration(minReplayWindow), FormatDuration(maxReplayWindow))
	}
	return d, nil
}

// ParseDuration reads a Go duration ("90s", "1h30m") with an optional leading whole number of
// days ("7d", "1d12h").
func ParseDuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a duration; want e.g. 30s, 10m, 24h or 7d", s)
	var days time.Duration
	rest := s
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseUint(s[:i], 10, 16)
		if err != nil || n > 10000 {
			return 0, bad
		}
		days, rest = time.Duration(n)*24*time.Hour, s[i+1:]
		if rest == "" {
			return days, nil
		}
	}
	if strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
		return 0, bad
	}
	d, err := time.ParseDuration(rest)
	if err != nil {
		return 0, bad
	}
	return days + d, nil
}

// FormatDuration writes d the way ParseDuration reads it, with days when whole.
func FormatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}

func (ps *parse) hook(n ast.Node) *Hook {
	members, ok := ps.mapping(n, "on_unknown")
	if !ok {
		return nil
	}
	h := &Hook{Retries: DefaultRetries, Timeout: DefaultTimeout}
	var cmdN, urlN ast.Node
	for _, m := range members {
		switch m.key {
		case "command":
			cmdN = m.keyN
			argv, nodes, ok := ps.list(m.value, "command", `["notify-oncall", "--team", "payments"]`, false)
			if !ok {
				continue
			}
			if len(argv) == 0 || argv[0] == "" {
				ps.errorf(m.value, "command must name a program to run, e.g. [\"notify-oncall\", \"--team\", \"payments\"]")
				continue
			}
			for i, a := range argv {
				if strings.IndexByte(a, 0) >= 0 {
					ps.errorf(nodes[i], "command arguments cannot hold a NUL byte")
				}
			}
			h.Command = argv
		case "url":
			urlN = m.keyN
			if s, ok := ps.str(m.value, "url"); ok {
				if err := checkHookURL(s); err != nil {
					ps.errorf(m.value, "url: %v", err)
				}
				h.URL = s
			}
		case "retries":
			_, isInt := m.value.(*ast.IntegerNode)
			n, err := strconv.Atoi(m.value.GetToken().Value)
			if !isInt || err != nil || n < 0 || n > maxHookRetries {
				ps.errorf(m.value, "retries must be a whole number from 0 to %d", maxHookRetries)
				continue
			}
			h.Retries = n
		case "timeout":
			if d := ps.duration(m.value, "timeout", minHookTimeout, maxHookTimeout); d > 0 {
				h.Timeout = d
			}
		default:
			ps.unknownKey(m, "on_unknown", hookKeys)
		}
	}
	switch {
	case cmdN != nil && urlN != nil:
		ps.errorf(urlN, "on_unknown takes command or url, not both")
	case cmdN == nil && urlN == nil:
		ps.errorf(n, "on_unknown needs command: [program, args...] or url: https://...")
	}
	return h
}

// checkHookURL accepts https URLs, and http only to this machine (a local relay or a test).
// Its errors, which wrap prints as it refuses the policy, name the URL by its scheme and host
// alone (httpback.ShownURL): the rest of a webhook's URL is its secret (docs/privacy.md).
// Before, they quoted the whole URL.
func checkHookURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Host == "" {
		return errors.New("the URL has no host; want https://host/path")
	}
	// A port no connection can reach would fail every delivery, each an unknown outcome no
	// one hears of; before 2026-12-06 http://localhost:99999/ was accepted.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%s: port %q; want a number from 1 to 65535", httpback.ShownURL(s), p)
		}
	}
	switch u.Scheme { // url.Parse gives it in lower case
	case "https":
		return nil
	case "http":
		// Host names are not case-sensitive: LOCALHOST is this machine too.
		host := u.Hostname()
		if ip := net.ParseIP(host); strings.EqualFold(host, "localhost") || ip != nil && ip.IsLoopback() {
			return nil
		}
		return fmt.Errorf("%s: plain http only to this machine (localhost); the event names tools and redacted arguments, so use https", httpback.ShownURL(s))
	}
	return fmt.Errorf("%s: want an https:// URL", httpback.ShownURL(s))
}
