package scan

import (
	"bytes"
	"regexp"
	"sort"
	"strings"
)

// decl is one tool declaration as found in one file, before names are resolved across the
// repository.
type decl struct {
	name     string // literal name, when written in place
	ref      string // the constant or enum member naming it, when not
	style    string // how it was declared, for the report
	line     int
	from, to int      // line range of the tool's own block
	handlers []string // identifiers passed as the tool's handler
	generic  bool     // found by its shape (generic.go), not by a style's pattern
}

var (
	// a call to anything whose name ends in "tool": server.tool(, registerTool(, mcp.NewTool(,
	// registerPaidTool(, add_tool(, define_tool(, ...
	toolCallRe = regexp.MustCompile(`(?i)\b((?:[a-z_$][\w$]*(?:\.|::))*[a-z_$]*tool(?:task|definition)?)\s*\(`)
	// tool objects in arrays and maps: { name: "x", description, inputSchema, handler }
	objKeyRe = regexp.MustCompile(`\b(name|method)\s*:\s*(["'` + "`" + `])([\w\-./:]{1,100})["'` + "`" + `]`)
	// JS/TS class fields: name = "insert-many"
	classFieldRe   = regexp.MustCompile(`(?m)^[ \t]*(?:(?:public|protected|private|readonly|static|override)\s+)*(?:name|toolName|tool_name)\s*(?::\s*[\w.]+\s*)?=\s*(["'` + "`" + `])([\w\-./:]{1,100})["'` + "`" + `]`)
	objHasDescRe   = regexp.MustCompile(`\b(?:description|title)\s*[:(=]`)
	objHasSchemaRe = regexp.MustCompile(`\b(?:inputSchema|input_schema|parameters|schema|argsSchema|argsShape|args|execute|handler|handle|run|callback|cb|annotations|fn|func|invoke|call)\s*[:(=,]`)

	pyDecoRe   = regexp.MustCompile(`(?m)^([ \t]*)@((?:\w+\.)*(\w*tool))\b`)
	pyDefRe    = regexp.MustCompile(`(?m)^([ \t]*)(?:async\s+)?def\s+(\w+)\s*\(`)
	pyToolCtor = regexp.MustCompile(`\b(?:types\.|mcp\.)?Tool\s*\(`)

	goLiteralRe = regexp.MustCompile(`\b\w+\.Tool\s*\{`)
	goNameRe    = regexp.MustCompile(`\bName\s*:\s*`)

	rustAttrRe  = regexp.MustCompile(`#\[tool(\(|\])`)
	rustFnRe    = regexp.MustCompile(`\bfn\s+(\w+)`)
	rustNewRe   = regexp.MustCompile(`\bTool::new\s*\(`)
	javaAnnoRe  = regexp.MustCompile(`@(?:Mcp)?Tool\b`)
	javaSigRe   = regexp.MustCompile(`(?m)^[ \t]*(?:(?:public|private|protected|static|final|synchronized|default)\s+)*[\w<>\[\],.? ]+?\s+(\w+)\s*\(`)
	javaNewRe   = regexp.MustCompile(`\bnew\s+(?:McpSchema\.)?Tool\s*\(`)
	javaBuildRe = regexp.MustCompile(`\bTool\.builder\(\)`)
	javaNameRe  = regexp.MustCompile(`\.name\(\s*("[^"\n]{1,100}"|[A-Za-z_][\w.]*)\s*\)`)
	rubyClassRe = regexp.MustCompile(`(?m)^([ \t]*)class\s+(\w+)\s*<\s*(?:::)?((?:\w+::)*\w*Tool)\b`)
	rubyNameRe  = regexp.MustCompile(`(?m)^[ \t]*tool_name\s*\(?\s*["':]([\w\-./]+)["']?`)
)

// callExcluded lists callee prefixes that use a tool rather than declare one.
var callExcluded = []string{"get", "call", "find", "has", "is", "list", "remove", "use", "run",
	"invoke", "handle", "validate", "to", "from", "with", "describe", "unregister", "disable",
	"enable", "set", "lookup", "delete", "execute", "parse", "load", "select", "format", "mock",
	"expect", "render", "wrap", "log", "print", "test", "assert", "on", "before", "after"}

func calleeDeclares(callee string) bool {
	last := callee
	if i := strings.LastIndexAny(callee, ".:"); i >= 0 {
		last = callee[i+1:]
	}
	ws := splitWords(last)
	switch {
	case len(ws) == 0:
		return false
	case ws[len(ws)-1] == "tool":
	case len(ws) >= 2 && ws[len(ws)-2] == "tool" && (ws[len(ws)-1] == "task" || ws[len(ws)-1] == "definition"):
		// registerToolTask("x", ...): a tool whose call runs as a task
	default:
		return false
	}
	for _, p := range callExcluded {
		if ws[0] == p {
			return false
		}
	}
	if len(ws) == 1 || ws[0] == "tool" {
		// a bare tool(...) or x.tool(...): only on something that looks like a server
		recv := strings.TrimSuffix(strings.TrimSuffix(callee, last), ".")
		if recv == "" {
			return true
		}
		for _, w := range splitWords(recv) {
			switch w {
			case "server", "srv", "mcp", "app", "router", "registry", "toolkit", "tools", "s", "this", "self", "fastmcp":
				return true
			}
		}
		return false
	}
	switch ws[0] {
	case "register", "add", "define", "create", "new", "make", "build", "declare", "expose", "provide", "server", "mcp":
		return true
	}
	return false
}

// findDecls returns the tool declarations in one file.
func findDecls(s *source) []decl {
	var out []decl
	switch s.lang {
	case langJS:
		out = append(out, findToolCalls(s)...)
		out = append(out, findToolObjects(s)...)
		out = append(out, findClassFields(s)...)
	case langPython:
		out = append(out, findPyDecorators(s)...)
		out = append(out, findPyCtors(s)...)
		out = append(out, findToolCalls(s)...)
	case langGo:
		out = append(out, findToolCalls(s)...)
		out = append(out, findGoLiterals(s)...)
		out = append(out, findToolObjects(s)...)
	case langRust:
		out = append(out, findRustAttrs(s)...)
		out = append(out, findCtorFirstArg(s, rustNewRe, "Tool::new")...)
	case langJava:
		out = append(out, findJavaAnnotations(s)...)
		out = append(out, findCtorFirstArg(s, javaNewRe, "new Tool")...)
		out = append(out, findJavaBuilders(s)...)
	case langRuby:
		out = append(out, findRubyClasses(s)...)
		out = append(out, findToolCalls(s)...)
	}
	return mergeShape(dedupeDecls(out), findShapeDecls(s))
}

func dedupeDecls(ds []decl) []decl {
	seen := map[string]bool{}
	var out []decl
	for _, d := range ds {
		k := d.name + "\x00" + d.ref + "\x00" + itoa(d.line)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, d)
	}
	return out
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	if n == 0 {
		return "0"
	}
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}

// declaresHere reports whether the text before off on its line defines a function (so a
// match is the definition of a wrapper, not a call of it).
func (s *source) definitionAt(off int) bool {
	ls := s.starts[s.lineOf(off)-1]
	pre := strings.TrimSpace(s.str[ls:off]) // a slice, not a copy of the line up to off
	for _, kw := range []string{"function", "def", "func", "fn", "async function", "export function", "export async function", "private", "public", "protected"} {
		if pre == kw || strings.HasPrefix(pre, kw+" ") || strings.HasSuffix(pre, " "+kw) {
			return true
		}
	}
	return strings.HasPrefix(pre, "func ") || strings.HasPrefix(pre, "def ")
}

// findToolCalls finds calls of tool-registering functions with the tool's name as an
// argument: server.tool("x"), registerTool("x"), mcp.NewTool(ToolX), registerPaidTool(server,
// "x"), add_tool(fn, name="x"), define_tool(name: "x").
func findToolCalls(s *source) []decl {
	var out []decl
	for _, m := range s.findLines(toolCallRe, "ool") {
		callee := string(s.text[m[2]:m[3]])
		if !calleeDeclares(callee) || s.definitionAt(m[0]) || s.inComment(m[0]) {
			continue
		}
		open := m[1] - 1
		if c := s.matchClose(open); c > 0 && s.nestedDecl(s.text[open+1:c]) {
			continue // AddTool(mcp.NewTool("x"), h) or NewTool(meta, mcp.Tool{Name: "x"}): the inner one names it
		}
		args := s.parseArgs(open, 3)
		name, ref := nameFromArgs(args)
		if name == "" && ref == "" {
			continue
		}
		if name != "" && !validToolName(name) {
			continue
		}
		d := decl{name: name, ref: ref, style: callee + "(...)", line: s.lineOf(m[0])}
		// the block: the whole call, or the enclosing register call it is an argument of
		start, end := open, s.matchClose(open)
		d.handlers = identArgs(args)
		if enc := s.enclosingCall(m[0]); enc >= 0 {
			if c := s.matchClose(enc); c > 0 {
				start, end = enc, c
				d.handlers = append(d.handlers, identArgs(s.parseArgs(enc, 6))...)
			}
		}
		if end < 0 {
			end = min(len(s.text)-1, open+2000)
		}
		d.from, d.to = s.lineOf(start), s.lineOf(end)
		if s.lang == langGo {
			d.from, d.to = s.goFuncBlock(m[0], d.from, d.to)
		}
		if s.lang == langRuby {
			if l := strings.TrimSpace(s.line(s.lineOf(end))); strings.HasSuffix(l, "do") || strings.Contains(l, " do |") {
				d.to = s.rubyBlockEnd(s.lineOf(m[0]))
			}
		}
		out = append(out, d)
	}
	return out
}

// nestedDecl reports whether call arguments hold a declaration of their own.
func (s *source) nestedDecl(args []byte) bool {
	for _, m := range toolCallRe.FindAllSubmatch(args, -1) {
		if calleeDeclares(string(m[1])) {
			return true
		}
	}
	return goLiteralRe.Match(args) || javaNewRe.Match(args) || rustNewRe.Match(args) || pyToolCtor.Match(args) && s.lang == langPython
}

// enclosingCall returns the '(' of a register call (AddTool, addTool, server.tool, ...Specification)
// that the offset is an argument of, or -1.
func (s *source) enclosingCall(off int) int {
	p := s.enclosingOpen(off, '(')
	if p < 0 {
		return -1
	}
	j := p
	for j > 0 && (s.text[j-1] == ' ' || s.text[j-1] == '\t') {
		j--
	}
	k := j
	for k > 0 && (isIdentByte(s.text[k-1]) || s.text[k-1] == '.' || s.text[k-1] == ':') {
		k--
	}
	callee := strings.ToLower(string(s.text[k:j]))
	if strings.HasSuffix(callee, "tool") || strings.HasSuffix(callee, "tools") || strings.HasSuffix(callee, "specification") || strings.HasSuffix(callee, "toolcall") {
		return p
	}
	return -1
}

func isIdentByte(b byte) bool {
	return b == '_' || b == '$' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

func identArgs(args []arg) []string {
	var out []string
	for _, a := range args {
		if a.ident != "" && !receiverLike(a.ident) {
			out = append(out, a.ident)
		}
	}
	return out
}

// goFuncBlock widens a Go declaration's block to its enclosing top-level function when that
// function declares only this tool (github-mcp-server style: func CreateIssue(...) (mcp.Tool,
// handler) { return mcp.NewTool(...), func(...) {...} }).
func (s *source) goFuncBlock(off, from, to int) (int, int) {
	head := 0
	for n := s.lineOf(off); n >= 1; n-- {
		if strings.HasPrefix(s.line(n), "func ") {
			head = n
			break
		}
	}
	if head == 0 {
		return from, to
	}
	end := 0
	for n := head; n <= s.lineCount(); n++ {
		if s.line(n) == "}" {
			end = n
			break
		}
	}
	if end == 0 || end < s.lineOf(off) {
		return from, to
	}
	body := s.text[s.starts[head-1]:s.starts[min(end, s.lineCount())-1]]
	count := len(toolCallRe.FindAll(body, 2)) + len(goLiteralRe.FindAll(body, 2))
	if count <= 1 {
		return head, end
	}
	return from, to
}

// inComment reports whether off sits in a comment: a comment-only line, or after a trailing
// // or # comment on a code line.
func (s *source) inComment(off int) bool {
	ll := s.lineLexed(s.lineOf(off))
	if ll.comment {
		return true
	}
	// the last string or comment that starts before off, read from the line's start
	k := sort.Search(len(ll.skips), func(i int) bool { return ll.skips[i].from >= off }) - 1
	return k >= 0 && ll.skips[k].to > off && ll.skips[k].block
}

// lineLex is what inComment needs of one line, read once: whether the whole line is a
// comment, and the strings and comments that start on it, skipped from the line's start
// (block marks a comment rather than a string). Reading them again for every match made a
// long line quadratic in its matches (30,000 declarations on one line took minutes).
type lineLex struct {
	comment bool
	skips   []skipRegion
}

func (s *source) lineLexed(n int) *lineLex {
	if ll, ok := s.lines[n]; ok {
		return ll
	}
	ll := &lineLex{comment: commentLine(s.line(n))}
	end := len(s.text)
	if n < len(s.starts) {
		end = s.starts[n]
	}
	for i := s.starts[n-1]; i < end; {
		j := s.skipString(i)
		if j == i {
			i++
			continue
		}
		ll.skips = append(ll.skips, skipRegion{i, j, s.text[i] == '/' || s.text[i] == '#'})
		i = j
	}
	if s.lines == nil {
		s.lines = map[int]*lineLex{}
	}
	s.lines[n] = ll
	return ll
}

// findToolObjects finds objects that describe a tool: a name or method key with a literal
// value, alongside a description and a schema or handler key. Where one object has both,
// method wins (Stripe's toolkit: method is the id, name the title).
func findToolObjects(s *source) []decl {
	type hit struct {
		key, val string
		off      int
	}
	byObj := map[int][]hit{}
	var order []int
	for _, m := range s.findLines(objKeyRe, "name", "method") {
		if s.inComment(m[0]) {
			continue
		}
		ob := s.enclosingOpen(m[0], '{')
		if ob < 0 {
			continue
		}
		if _, ok := byObj[ob]; !ok {
			order = append(order, ob)
		}
		byObj[ob] = append(byObj[ob], hit{string(s.text[m[2]:m[3]]), string(s.text[m[6]:m[7]]), m[0]})
	}
	var out []decl
	for _, ob := range order {
		cl := s.matchClose(ob)
		if cl < 0 {
			continue
		}
		body := s.text[ob:cl]
		if !objHasDescRe.Match(body) || !objHasSchemaRe.Match(body) || openAPIParamRe.Match(body) {
			continue
		}
		hs := byObj[ob]
		pick := hs[0]
		for _, h := range hs {
			if h.key == "method" {
				pick = h
				break
			}
		}
		d := decl{name: pick.val, style: "object " + pick.key + ":", line: s.lineOf(pick.off), from: s.lineOf(ob), to: s.lineOf(cl)}
		d.handlers = objectHandlers(body)
		out = append(out, d)
	}
	return out
}

var objHandlerRe = regexp.MustCompile(`\b(?:execute|handler|handle|run|callback|cb|fn|func|invoke|call)\s*:\s*([A-Za-z_$][\w$.]*)\s*[,}\n]`)

func objectHandlers(body []byte) []string {
	var out []string
	for _, m := range objHandlerRe.FindAllSubmatch(body, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// findClassFields finds TS/JS tool classes: class InsertManyTool extends ToolBase { name =
// "insert-many"; description = ...; execute() {...} }. The block is the class body.
func findClassFields(s *source) []decl {
	var out []decl
	for _, m := range s.findLines(classFieldRe, "name", "Name") {
		ob := s.enclosingOpen(m[0], '{')
		if ob < 0 {
			continue
		}
		cl := s.matchClose(ob)
		if cl < 0 {
			continue
		}
		body := s.text[ob:cl]
		if !objHasDescRe.Match(body) || !objHasSchemaRe.Match(body) {
			continue
		}
		out = append(out, decl{name: string(s.text[m[4]:m[5]]), style: "class field name =",
			line: s.lineOf(m[0]), from: s.lineOf(ob), to: s.lineOf(cl)})
	}
	return out
}

// findPyDecorators finds @mcp.tool(), @server.tool(name="x"), @tool("x") and similar on
// Python functions. The name is the name= argument, else a positional string, else the
// function's name; the block is the function body by indentation.
func findPyDecorators(s *source) []decl {
	var out []decl
	for _, m := range s.findLines(pyDecoRe, "@") {
		last := strings.ToLower(string(s.text[m[6]:m[7]]))
		if last != "tool" && !strings.HasSuffix(last, "_tool") || last == "call_tool" || strings.HasPrefix(last, "list_") {
			continue
		}
		after := m[1]
		var name, ref string
		if after < len(s.text) && s.text[after] == '(' {
			args := s.parseArgs(after, 4)
			name, ref = nameFromArgs(args)
			if c := s.matchClose(after); c > 0 {
				after = c + 1
			}
		}
		dm := pyDefRe.FindSubmatchIndex(s.text[after:])
		if dm == nil {
			continue
		}
		fn := string(s.text[after+dm[4] : after+dm[5]])
		_, to := s.pyFuncBlock(after + dm[0])
		if name == "" && ref == "" {
			name = fn
		}
		out = append(out, decl{name: name, ref: ref, style: "decorator @" + string(s.text[m[4]:m[5]]),
			line: s.lineOf(m[0]), from: s.lineOf(m[0]), to: to, handlers: []string{fn}})
	}
	return out
}

// pyFuncBlock returns the line range of the Python function whose def starts at off.
func (s *source) pyFuncBlock(off int) (int, int) {
	head := s.lineOf(off)
	base := indent(s.line(head))
	sigEnd := head
	if p := bytes.IndexByte(s.text[off:], '('); p >= 0 {
		if c := s.matchClose(off + p); c > 0 {
			sigEnd = s.lineOf(c)
		}
	}
	return head, max(sigEnd, s.indentBlockEnd(sigEnd, base))
}

// findPyCtors finds Tool(name="x" | name=Enum.MEMBER, description=..., inputSchema=...) as
// used with the low-level Python server. Its behaviour lives in a call_tool dispatch, which
// the repository pass attaches.
func findPyCtors(s *source) []decl {
	var out []decl
	for _, m := range s.findLines(pyToolCtor, "Tool") {
		if s.inComment(m[0]) || s.definitionAt(m[0]) {
			continue
		}
		open := m[1] - 1
		args := s.parseArgs(open, 8)
		var name, ref string
		hasDesc := false
		for _, a := range args {
			switch a.kw {
			case "name":
				name, ref = a.str, a.ident
			case "description", "inputSchema", "input_schema":
				hasDesc = true
			}
		}
		if !hasDesc || name == "" && ref == "" {
			continue
		}
		end := s.matchClose(open)
		if end < 0 {
			continue
		}
		out = append(out, decl{name: name, ref: ref, style: "Tool(name=...)", line: s.lineOf(m[0]), from: s.lineOf(m[0]), to: s.lineOf(end)})
	}
	return out
}

// findGoLiterals finds go-sdk style tool literals: &mcp.Tool{Name: "x", ...} and
// mcp.Tool{Name: ToolX}, including those passed to a wrapper constructor (NewTool(meta,
// mcp.Tool{...}, handler)).
func findGoLiterals(s *source) []decl {
	var out []decl
	for _, m := range s.findLines(goLiteralRe, ".Tool") {
		ob := m[1] - 1
		cl := s.matchClose(ob)
		if cl < 0 || s.inComment(m[0]) {
			continue
		}
		nm := goNameRe.FindIndex(s.text[ob:cl])
		if nm == nil {
			continue
		}
		i := ob + nm[1]
		var name, ref string
		if s.text[i] == '"' || s.text[i] == '`' {
			j := s.skipString(i)
			name = string(s.text[i+1 : j-1])
		} else if id := identRe.Find(s.text[i:cl]); id != nil {
			ref = string(id)
		}
		if name == "" && ref == "" || name != "" && !validToolName(name) {
			continue
		}
		d := decl{name: name, ref: ref, style: "literal mcp.Tool{Name:}", line: s.lineOf(ob + nm[0])}
		start, end := ob, cl
		if enc := s.enclosingCall(m[0]); enc >= 0 {
			if c := s.matchClose(enc); c > 0 {
				start, end = enc, c
				d.handlers = identArgs(s.parseArgs(enc, 6))
			}
		}
		d.from, d.to = s.goFuncBlock(m[0], s.lineOf(start), s.lineOf(end))
		out = append(out, d)
	}
	return out
}

// findRustAttrs finds rmcp #[tool(...)] methods; name = "x" overrides the method name.
func findRustAttrs(s *source) []decl {
	var out []decl
	for _, m := range s.findLines(rustAttrRe, "#[tool") {
		after := m[1]
		var name, ref string
		if s.text[m[2]] == '(' {
			open := m[2]
			args := s.parseArgs(open, 6)
			for _, a := range args {
				if a.kw == "name" {
					name, ref = a.str, a.ident
				}
			}
			if c := s.matchClose(open); c > 0 {
				after = c + 1
			}
		}
		if !s.rustFnFollows(after) {
			continue // #[tool(tool_box)] on an impl, #[tool(aggr)] on a parameter
		}
		fm := rustFnRe.FindSubmatchIndex(s.text[after:])
		if fm == nil {
			continue
		}
		fn := string(s.text[after+fm[2] : after+fm[3]])
		from, to := s.braceBodyAfter(after + fm[1])
		if name == "" && ref == "" {
			name = fn
		}
		out = append(out, decl{name: name, ref: ref, style: "attribute #[tool]", line: s.lineOf(m[0]),
			from: min(from, s.lineOf(m[0])), to: to})
	}
	return out
}

// rustFnFollows reports whether the item after an attribute ending at off is a function:
// only other attributes, doc comments and qualifiers may stand between them.
func (s *source) rustFnFollows(off int) bool {
	i := off
	if i < len(s.text) && s.text[i] == ']' {
		i++ // the end of the #[tool(...)] attribute itself
	}
	for i < len(s.text) {
		i = skipSpace(s.text, i, len(s.text))
		rest := s.text[i:]
		switch {
		case bytes.HasPrefix(rest, []byte("#[")):
			c := s.matchClose(i + 1)
			if c < 0 {
				return false
			}
			i = c + 1
		case bytes.HasPrefix(rest, []byte("//")):
			for i < len(s.text) && s.text[i] != '\n' {
				i++
			}
		default:
			for _, kw := range []string{"pub(crate) ", "pub ", "async ", "const ", "unsafe ", "extern "} {
				if bytes.HasPrefix(rest, []byte(kw)) {
					i += len(kw)
					goto next
				}
			}
			return bytes.HasPrefix(rest, []byte("fn "))
		}
	next:
	}
	return false
}

// braceBodyAfter returns the lines of the first {...} body at or after off, skipping a
// parameter list first.
func (s *source) braceBodyAfter(off int) (int, int) {
	i := off
	for i < len(s.text) {
		if j := s.skipString(i); j != i {
			i = j
			continue
		}
		switch s.text[i] {
		case '(':
			if c := s.matchClose(i); c > 0 {
				i = c + 1
				continue
			}
		case '{':
			if c := s.matchClose(i); c > 0 {
				return s.lineOf(off), s.lineOf(c)
			}
			return s.lineOf(off), s.lineOf(off)
		case ';':
			return s.lineOf(off), s.lineOf(i)
		}
		i++
	}
	return s.lineOf(off), s.lineOf(off)
}

// findCtorFirstArg finds constructors whose first argument is the tool name:
// Tool::new("x", ...) in Rust, new Tool("x", ...) in the Java SDK.
func findCtorFirstArg(s *source, re *regexp.Regexp, style string) []decl {
	var out []decl
	for _, m := range s.findLines(re, "Tool") {
		if s.inComment(m[0]) {
			continue
		}
		open := m[1] - 1
		args := s.parseArgs(open, 1)
		if len(args) == 0 {
			continue
		}
		name, ref := args[0].str, args[0].ident
		if !args[0].isStr {
			name = ""
		}
		if name == "" && ref == "" || name != "" && !validToolName(name) {
			continue
		}
		d := decl{name: name, ref: ref, style: style, line: s.lineOf(m[0])}
		start, end := open, s.matchClose(open)
		if enc := s.enclosingCall(m[0]); enc >= 0 {
			if c := s.matchClose(enc); c > 0 {
				start, end = enc, c
				d.handlers = identArgs(s.parseArgs(enc, 6))
			}
		}
		if end < 0 {
			end = open
		}
		d.from, d.to = s.lineOf(start), s.lineOf(end)
		out = append(out, d)
	}
	return out
}

// findJavaAnnotations finds @Tool / @McpTool methods (Spring AI, Quarkus, LangChain4j).
func findJavaAnnotations(s *source) []decl {
	var out []decl
	for _, m := range s.findLines(javaAnnoRe, "@") {
		if s.inComment(m[0]) || m[1] < len(s.text) && s.text[m[1]] == '.' {
			continue // @McpTool.McpAnnotations(...) nested in the annotation is not a second tool
		}
		after := m[1]
		var name, ref string
		if after < len(s.text) && s.text[after] == '(' {
			for _, a := range s.parseArgs(after, 6) {
				if a.kw == "name" {
					name, ref = a.str, a.ident
				}
			}
			if c := s.matchClose(after); c > 0 {
				after = c + 1
			}
		}
		sm := javaSigRe.FindSubmatchIndex(s.text[after:])
		if sm == nil {
			continue
		}
		fn := string(s.text[after+sm[2] : after+sm[3]])
		_, to := s.braceBodyAfter(after + sm[1] - 1)
		if name == "" && ref == "" {
			name = fn
		}
		out = append(out, decl{name: name, ref: ref, style: "annotation @Tool", line: s.lineOf(m[0]), from: s.lineOf(m[0]), to: to})
	}
	return out
}

// findJavaBuilders finds McpSchema.Tool.builder()...name("x") declarations.
func findJavaBuilders(s *source) []decl {
	var out []decl
	for _, m := range s.findLines(javaBuildRe, "Tool.builder") {
		end := min(len(s.text), m[1]+600)
		nm := javaNameRe.FindSubmatchIndex(s.text[m[1]:end])
		if nm == nil {
			continue
		}
		v := string(s.text[m[1]+nm[2] : m[1]+nm[3]])
		d := decl{style: "Tool.builder().name()", line: s.lineOf(m[0])}
		if strings.HasPrefix(v, `"`) {
			d.name = strings.Trim(v, `"`)
		} else {
			d.ref = v
		}
		start, stop := m[0], m[1]+nm[1]
		if enc := s.enclosingCall(m[0]); enc >= 0 {
			if c := s.matchClose(enc); c > 0 {
				start, stop = enc, c
			}
		}
		d.from, d.to = s.lineOf(start), s.lineOf(stop)
		out = append(out, d)
	}
	return out
}

// findRubyClasses finds class X < MCP::Tool (or FastMcp::Tool, ApplicationTool...). The name
// is tool_name "x" when given, else the class name in snake_case without a Tool suffix.
func findRubyClasses(s *source) []decl {
	var out []decl
	for _, m := range s.findLines(rubyClassRe, "class") {
		head := s.lineOf(m[0])
		to := s.rubyBlockEnd(head)
		cls := string(s.text[m[4]:m[5]])
		name := ""
		body := s.text[s.starts[head-1]:endOffset(s, to)]
		if nm := rubyNameRe.FindSubmatch(body); nm != nil {
			name = string(nm[1])
		} else {
			ws := splitWords(cls)
			if len(ws) > 1 && ws[len(ws)-1] == "tool" {
				ws = ws[:len(ws)-1]
			}
			name = strings.Join(ws, "_")
		}
		out = append(out, decl{name: name, style: "class < " + string(s.text[m[6]:m[7]]), line: head, from: head, to: to})
	}
	return out
}

func endOffset(s *source, line int) int {
	if line >= s.lineCount() {
		return len(s.text)
	}
	return s.starts[line]
}
