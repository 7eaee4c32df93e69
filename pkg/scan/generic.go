package scan

import (
	"bytes"
	"regexp"
	"sort"
	"strings"
)

// The generic finder. Every MCP tool has a name, a description and an input schema, because
// tools/list must publish all three. Whatever the SDK or house style, a declaration therefore
// puts a name-like string (or a constant naming one) in a "name" position close to a
// description and a schema or parameter list. This finder looks for that shape instead of
// one pattern per style; the precise patterns in decl.go stay the fast path and win where
// both see the same tool.

var (
	// a name position: name: "x", "name": "x", name = "x", .name = X, name("x"), :name => "x",
	// tool_name 'x' (Ruby DSL), Name: X. The value is a literal or a constant-like reference.
	shapeNameRe = regexp.MustCompile(`(?:^|[^\w$])["':]?(?:tool_?[Nn]ame|toolName|[Nn]ame|NAME)["']?\s*(=>|:|=|\(|\s)\s*(?:(["'` + "`" + `])([\w\-./:]{1,100})["'` + "`" + `]|([A-Z][A-Za-z0-9_]*(?:(?:\.|::)[A-Za-z_]\w*)*))`)
	// a description near it: description: / .description = / "description" / @Description /
	// description 'x' (Ruby DSL) / desc
	shapeDescRe = regexp.MustCompile(`(?i)\b(?:description|desc)\b\s*(?:["']\s*)?(?:=>|[:=(]|\s+["'])`)
	// a schema or parameter list near it
	shapeSchemaRe = regexp.MustCompile(`(?i)\b(?:input_?schema|inputschema|argsSchema|params_?schema|parameters|input_schema|schema|properties|argument)\b`)
	// a name-like literal opening a call's arguments: register("x", "what it does", schema)
	posNameRe = regexp.MustCompile(`(?:\(|^)\s*(["'])([\w\-.]{2,100})["']\s*,`)
	// Ruby DSL: tool "greet" do ... end
	rubyToolBlockRe = regexp.MustCompile(`^[ \t]*tool\s+(["'])([\w\-.]{2,100})["']\s+do\b`)
	// the schema key MCP itself names: enough context on its own
	mcpSchemaRe = regexp.MustCompile(`(?i)\binput_?schema\b`)
	// what a tool is not: prompts and resources have names and descriptions too
	shapeNotToolRe = regexp.MustCompile(`(?i)\b(?:resource_?template|uri_?template|mime_?type|mimeType)\b`)
	// an OpenAPI parameter: { name, in: "path", description, schema }
	openAPIParamRe = regexp.MustCompile(`\bin["']?\s*[:=]\s*["'](?:path|query|header|cookie)["']`)
	// a file is worth the generic pass only if it talks about tools at all
	shapeGate = []byte("ool")
)

// shapeWindow is how many lines after a name the description and schema may appear when the
// name is not inside a bracketed object or call (field assignments, Ruby DSL lines).
const shapeWindow = 30

// findShapeDecls finds tool declarations by their shape in any of the six languages.
func findShapeDecls(s *source) []decl {
	if !bytes.Contains(s.text, shapeGate) {
		return nil
	}
	var out []decl
	seen := map[string]bool{}
	// keyed shapes need the word description (or desc) somewhere in the file; positional
	// ones carry the description as a bare string
	keyed := bytes.Contains(s.text, []byte("escription")) || bytes.Contains(s.text, []byte("desc"))
	for _, m := range s.findLinesWhere(shapeNameRe, func(l []byte) bool { return keyed && shapeLine(l) }) {
		if s.inComment(m[0]) {
			continue
		}
		var name, ref string
		if m[6] >= 0 {
			name = string(s.text[m[6]:m[7]])
			if !validToolName(name) || !nameLike(name) {
				continue
			}
		} else {
			ref = string(s.text[m[8]:m[9]])
			if !constantLike(ref) || conversions[ref] || strings.TrimSpace(string(s.text[m[2]:m[3]])) == "" {
				continue // Name ToolName is a Go field declaration, not a value
			}
		}
		if strings.TrimSpace(string(s.text[m[2]:m[3]])) == "" && !bytes.Contains(bytes.ToLower(s.text[m[0]:m[2]]), []byte("tool")) {
			continue // name "x" with only a space is Ruby DSL; only tool_name "x" names a tool
		}
		n := s.lineOf(m[0])
		if !s.shapeNear(n) {
			continue // cheap: no description and schema within reach of this name
		}
		from, to := s.shapeBlock(m[0], n)
		body := s.text[s.starts[from-1]:endOffset(s, to)]
		if !shapeDescRe.Match(body) || !shapeSchemaRe.Match(body) || shapeNotToolRe.Match(body) || openAPIParamRe.Match(body) {
			continue
		}
		if !mcpSchemaRe.Match(body) && !toolContext(s, from, to) || s.inBlockComment(m[0]) {
			continue
		}
		key := name + "\x00" + ref
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, decl{name: name, ref: ref, style: "shape: name + description + schema", line: n, from: from, to: to, generic: true})
	}
	for _, d := range findPositionalShapes(s) {
		if !seen[d.name+"\x00"] {
			seen[d.name+"\x00"] = true
			out = append(out, d)
		}
	}
	if s.lang == langRuby {
		for _, m := range s.findLines(rubyToolBlockRe, "tool") {
			name := string(s.text[m[4]:m[5]])
			n := s.lineOf(m[0])
			if seen[name+"\x00"] || !nameLike(name) {
				continue
			}
			to := s.rubyBlockEnd(n)
			body := s.text[s.starts[n-1]:endOffset(s, to)]
			if !shapeDescRe.Match(body) {
				continue
			}
			seen[name+"\x00"] = true
			out = append(out, decl{name: name, style: "shape: tool \"name\" do ... end", line: n, from: n, to: to, generic: true})
		}
	}
	return out
}

// findPositionalShapes finds calls whose arguments are a tool's three parts in order: a
// name-like literal, a description in words, and a schema (Rust registry.register("x",
// "Manage x.", json!({...}), handler), Tool.new("x", "Does y", {...})).
func findPositionalShapes(s *source) []decl {
	var out []decl
	for _, m := range s.findLinesWhere(posNameRe, func(l []byte) bool {
		return len(l) < 400 && (bytes.Contains(l, []byte(`",`)) || bytes.Contains(l, []byte(`',`)) || bytes.Contains(l, []byte(`" ,`)))
	}) {
		lit := m[2]
		if !s.schemaNear(s.lineOf(lit)) {
			continue
		}
		open := s.enclosingOpen(lit, '(')
		if open < 0 || len(bytes.TrimSpace(s.text[open+1:lit])) != 0 || s.inComment(lit) {
			continue
		}
		args := s.parseArgs(open, 3)
		if len(args) < 3 || !args[0].isStr || !args[1].isStr || !strings.Contains(args[1].str, " ") {
			continue
		}
		name := args[0].str
		if !validToolName(name) || !nameLike(name) || leadingEffectVerb(args[1].str) == "" && !descLike(args[1].str) {
			continue
		}
		cl := s.matchClose(open)
		if cl < 0 {
			continue
		}
		call := s.text[open:cl]
		if !shapeSchemaRe.Match(call) || shapeNotToolRe.Match(call) {
			continue
		}
		from, to := s.lineOf(open), s.lineOf(cl)
		if !mcpSchemaRe.Match(call) && !toolContext(s, from, to) || s.inBlockComment(lit) {
			continue
		}
		out = append(out, decl{name: name, style: "shape: (name, description, schema) arguments", line: s.lineOf(lit), from: from, to: to, generic: true})
	}
	return out
}

// descLike reports whether a string reads as a sentence describing something: words with
// spaces, starting with a letter.
func descLike(d string) bool {
	return len(d) >= 8 && strings.Count(d, " ") >= 1 && (d[0] >= 'A' && d[0] <= 'Z' || d[0] >= 'a' && d[0] <= 'z')
}

// shapeLine cheaply picks lines that may hold a name position.
func shapeLine(l []byte) bool {
	return len(l) < 400 && (bytes.Contains(l, []byte("ame")) || bytes.Contains(l, []byte("AME")))
}

// nameLike rejects literals that are plainly not tool names: versions, paths, URLs, MIME
// types, single characters.
func nameLike(n string) bool {
	if len(n) < 2 || strings.ContainsAny(n, "/:") || strings.Count(n, ".") > 1 {
		return false
	}
	return n[0] < '0' || n[0] > '9'
}

// shapeBlock is the extent a name belongs to: the innermost bracketed object or call holding
// it when that is small enough to be one tool, else a window of lines after it.
func (s *source) shapeBlock(off, line int) (int, int) {
	for _, open := range []byte{'{', '('} {
		ob := s.enclosingOpen(off, open)
		if ob < 0 {
			continue
		}
		cl := s.matchClose(ob)
		if cl < 0 {
			continue
		}
		from, to := s.lineOf(ob), s.lineOf(cl)
		if to-from <= 200 && s.lineOf(ob) >= line-40 {
			return from, to
		}
	}
	return line, min(s.lineCount(), line+shapeWindow)
}

// toolContext asks for the word "tool" in or just around the block, so a form field or a
// config entry with a name, a description and a schema is not taken for a tool.
func toolContext(s *source, from, to int) bool {
	a := max(1, from-40)
	b := min(s.lineCount(), to+5)
	body := bytes.ToLower(s.text[s.starts[a-1]:endOffset(s, b)])
	return bytes.Contains(body, []byte("tool")) || strings.Contains(strings.ToLower(s.rel), "tool")
}

// inBlockComment reports whether off lies inside a block comment (/* */) or, in Python, a
// triple-quoted string: sample JSON in a comment is not a declaration.
func (s *source) inBlockComment(off int) bool {
	lx := s.lexed()
	k := sort.Search(len(lx.skips), func(i int) bool { return lx.skips[i].from > off }) - 1
	return k >= 0 && lx.skips[k].to > off && lx.skips[k].block
}

// mergeShape adds the generic finder's declarations that the precise patterns did not
// already make: same name or reference, or a name inside a precise declaration's block, is
// the same tool.
func mergeShape(precise, shape []decl) []decl {
	out := precise
	for _, g := range shape {
		dup := false
		for _, p := range precise {
			if g.name != "" && g.name == p.name || g.ref != "" && g.ref == p.ref || g.line >= p.from && g.line <= p.to {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, g)
		}
	}
	return out
}

var (
	// a description literal in any of the six languages: description: "x", description = "x",
	// .description("x"), Description: "x", description 'x' (Ruby DSL), @Description("x")
	descLitRe = regexp.MustCompile(`(?i)\bdescription["']?\s*(?:=>|[:=(]|\s)\s*(?:[frb]|)(?:"""|'''|["'` + "`" + `])\s*([A-Za-z][^"'` + "`" + `\n]{0,200})`)
	// a Python docstring opening a decorated function
	docstringRe = regexp.MustCompile(`(?:"""|''')\s*([A-Za-z][^\n"']{0,200})`)
	// descriptions that say a tool only looks, whatever verb they start with
	readOnlyDescRe = regexp.MustCompile(`(?i)read[- ]only|does not (?:modify|change|write)|without (?:modifying|changing)|no side effects`)
)

// descFiller are words a description may begin with before its verb: "Tool to create...",
// "This tool will send...", "Use this to delete...".
var descFiller = wordSet("tool", "tools", "to", "this", "that", "will", "use", "a", "an", "the", "mcp",
	"it", "helps", "allows", "you", "lets", "used", "for", "which", "can", "please", "function",
	"method", "endpoint", "command", "simply", "quickly", "safely")

// descriptionVerb returns the effect verb a tool's description begins with, or "": the
// published description for --run, else the description literal in its own block.
func descriptionVerb(dr *toolDraft) string {
	desc := ""
	if dr.pub != nil && dr.pub.Description != "" {
		desc = dr.pub.Description
	} else {
		s := dr.src
		body := s.text[s.starts[dr.d.from-1]:endOffset(s, dr.d.to)]
		if m := descLitRe.FindSubmatch(body); m != nil {
			desc = string(m[1])
		} else if s.lang == langPython {
			if m := docstringRe.FindSubmatch(body); m != nil {
				desc = string(m[1])
			}
		}
	}
	return leadingEffectVerb(desc)
}

// leadingEffectVerb returns the description's first verb when it is an effect word (and not
// also a read word), after filler words; "Creates" counts as create.
func leadingEffectVerb(desc string) string {
	if desc == "" || readOnlyDescRe.MatchString(desc) {
		return ""
	}
	for _, w := range splitWords(desc) {
		if descFiller[w] {
			continue
		}
		for _, v := range []string{w, strings.TrimSuffix(w, "s"), strings.TrimSuffix(w, "es")} {
			if readWords[v] {
				return ""
			}
			if effectWords[v] {
				return v
			}
		}
		return ""
	}
	return ""
}

// shapeNear is the cheap test run before any bracket matching: a description and a schema
// marker within shapeReach lines of line n. Bracket matching scans from the start of the
// file, so without this a large file with many name= arguments would cost quadratic time.
// The markers are counted once per file into prefix sums.
func (s *source) shapeNear(n int) bool {
	if s.descSum == nil {
		s.descSum = s.markerSums(shapeDescRe, "esc")
		s.schemaSum = s.markerSums(shapeSchemaRe, "chema", "ropert", "aram", "rgument", "SCHEMA", "ROPERT")
	}
	a := max(1, n-shapeReach)
	b := min(s.lineCount(), n+shapeReach)
	return s.descSum[b]-s.descSum[a-1] > 0 && s.schemaSum[b]-s.schemaSum[a-1] > 0
}

// schemaNear is shapeNear for positional shapes, whose description is the second argument.
func (s *source) schemaNear(n int) bool {
	s.shapeNear(n)
	a := max(1, n-shapeReach)
	b := min(s.lineCount(), n+shapeReach)
	return s.schemaSum[b]-s.schemaSum[a-1] > 0
}

// markerSums returns, for each line k, how many of lines 1..k match re (sum[0] = 0).
func (s *source) markerSums(re *regexp.Regexp, triggers ...string) []int32 {
	sum := make([]int32, s.lineCount()+1)
	hit := make([]bool, s.lineCount()+1)
	for _, m := range s.findLines(re, triggers...) {
		hit[s.lineOf(m[0])] = true
	}
	for k := 1; k <= s.lineCount(); k++ {
		sum[k] = sum[k-1]
		if hit[k] {
			sum[k]++
		}
	}
	return sum
}

// shapeReach bounds how far from a name its description and schema may be.
const shapeReach = 60
