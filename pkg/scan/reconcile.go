package scan

import (
	"bytes"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// registrationHints are what a file that declares MCP tools almost always holds: a register
// call, a tool decorator or attribute, or an inputSchema key with a value. A file holding one
// (outside comments and definitions) where no declaration was resolved is worth a note: the
// scan may be blind to its style.
var registrationHints = []string{
	"registerTool(", "RegisterTool(", ".tool(", "@mcp.tool", "@server.tool", "add_tool(", "AddTool(",
	"addTool(", "NewTool(", "#[tool(", "#[tool]", "@Tool(", "@McpTool(", "MCP::Tool", "Tool.builder()",
	"inputSchema:", "inputSchema\":", "input_schema=", "input_schema:", "InputSchema:", "\"input_schema\":",
}

var hintRe = regexp.MustCompile(regexp.QuoteMeta(registrationHints[0]) + func() string {
	var b strings.Builder
	for _, h := range registrationHints[1:] {
		b.WriteString("|" + regexp.QuoteMeta(h))
	}
	return b.String()
}())

var definitionStart = []string{"func ", "def ", "fn ", "pub fn ", "function ", "export function ", "type ", "interface ", "public ", "private ", "protected ", "async def ", "static "}

// registrationSites returns the lines that hold a registration hint (outside comments,
// definitions and `x.tool()` reads).
func registrationSites(s *source) []int {
	var lines []int
	for _, m := range s.findLinesWhere(hintRe, func(l []byte) bool { return bytes.Contains(l, []byte("ool")) || bytes.Contains(l, []byte("chema")) }) {
		n := s.lineOf(m[0])
		l := strings.TrimSpace(s.line(n))
		if commentLine(l) || s.inComment(m[0]) || m[1] < len(s.text) && s.text[m[1]] == ')' {
			continue // x.tool() reads a tool; it declares none
		}
		if strings.HasPrefix(l, "#[tool(tool_box") {
			continue // rmcp's router attribute on an impl: its #[tool] methods are the tools
		}
		def := false
		for _, d := range definitionStart {
			if strings.HasPrefix(l, d) && !strings.Contains(l, "=") {
				def = true
				break
			}
		}
		if !def && !s.inBlockComment(m[0]) && (len(lines) == 0 || lines[len(lines)-1] != n) {
			lines = append(lines, n)
		}
	}
	return lines
}

// declSlack is how far above a declaration's first line a hint still belongs to it: a
// decorator or attribute line, a builder's opening.
const declSlack = 3

// uncoveredSites returns the registration sites of a file that lie in no declaration's
// extent (found or unresolved) and on no line of a tool reported in that file.
func uncoveredSites(f fileResult, toolLines map[int]bool) []int {
	var out []int
	for _, n := range f.hints {
		covered := toolLines[n]
		for _, d := range f.decls {
			if n >= d.from-declSlack && n <= d.to || n == d.line {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, n)
		}
	}
	return out
}

// maxNoteFiles caps the files one note lists.
const maxNoteFiles = 50

// addNotes says what the scan could not see: never a silent zero.
func addNotes(rep *Report, files []fileResult) {
	rep.Notes = []Note{}
	declared := map[string]bool{}
	for _, ts := range [][]Tool{rep.Candidates, rep.Others} {
		for _, t := range ts {
			declared[t.File] = true
		}
	}
	for _, u := range rep.Unresolved {
		declared[u.File] = true
	}
	toolLines := map[string]map[int]bool{}
	for _, ts := range [][]Tool{rep.Candidates, rep.Others} {
		for _, t := range ts {
			if toolLines[t.File] == nil {
				toolLines[t.File] = map[int]bool{}
			}
			toolLines[t.File][t.Line] = true
		}
	}
	var blind, partly []string
	for _, f := range files {
		switch {
		case len(f.hints) == 0:
		case !declared[f.src.rel]:
			blind = append(blind, f.src.rel)
		default:
			for _, n := range uncoveredSites(f, toolLines[f.src.rel]) {
				partly = append(partly, f.src.rel+":"+itoa(n))
			}
		}
	}
	sort.Strings(blind)
	shown := blind
	if len(shown) > maxNoteFiles {
		shown = shown[:maxNoteFiles]
	}
	total := len(rep.Candidates) + len(rep.Others)
	switch {
	case total == 0 && len(blind) > 0:
		rep.Notes = append(rep.Notes, Note{Kind: "no_declarations", Files: shown,
			Text: fmt.Sprintf("no tool declaration was resolved, although %d file(s) mention tool registration (registerTool, @mcp, tool(, inputSchema...): this tree declares its tools in a way the scan does not recognise; a zero here is not evidence of no tools (try --run)", len(blind))})
	case total == 0:
		rep.Notes = append(rep.Notes, Note{Kind: "no_declarations",
			Text: fmt.Sprintf("no MCP tool declaration found in %d source file(s): this may not be an MCP server, its tools may be declared in dependencies or generated at run time, or in a way the scan does not recognise (try --run)", rep.Files.Scanned)})
	case len(blind) > 0:
		rep.Notes = append(rep.Notes, Note{Kind: "unresolved_files", Files: shown,
			Text: fmt.Sprintf("%d file(s) mention tool registration but no declaration was resolved in them: tools declared there may be missing from this report", len(blind))})
	}
	if len(partly) > 0 {
		// files where some tools were found: a register call or schema beside them that no
		// declaration covers may be a tool the scan could not name (a computed name, tools
		// built in a loop); listed by line, since the file itself is in the report
		shownSites := partly
		if len(shownSites) > maxNoteFiles {
			shownSites = shownSites[:maxNoteFiles]
		}
		rep.Notes = append(rep.Notes, Note{Kind: "unresolved_sites", Files: shownSites,
			Text: fmt.Sprintf("%d registration site(s) (registerTool, @mcp, tool(, inputSchema...) in files where other tools were found belong to no declaration the scan resolved: tools declared there may be missing from this report", len(partly))})
	}
	if rep.Run != nil {
		if len(rep.Run.Published) == 0 {
			rep.Notes = append(rep.Notes, Note{Kind: "published_none", Text: "the server listed no tools in tools/list"})
		}
		if len(rep.Run.NotInCode) > 0 {
			rep.Notes = append(rep.Notes, Note{Kind: "published_not_in_code",
				Text: fmt.Sprintf("%d published tool(s) could not be found in the code (%s): they are classified from their names and published annotations only", len(rep.Run.NotInCode), strings.Join(shortNames(firstN(rep.Run.NotInCode, 10)), ", "))})
		}
	}
}

// shortNames returns names each cut as shortName does, for a note's text
// (run.published_not_in_code has them whole).
func shortNames(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = shortName(n)
	}
	return out
}

func firstN(ss []string, n int) []string {
	if len(ss) > n {
		return append(append([]string{}, ss[:n]...), fmt.Sprintf("and %d more", len(ss)-n))
	}
	return ss
}

// followPublished sets the server's published list against the declarations: each draft
// learns whether it is published; each published name the finders missed is looked for as a
// string literal in the code and, when found, becomes a declaration there; the rest are
// tools known only from the server's list.
func followPublished(rep *Report, files []fileResult, drafts []*toolDraft, opts Options) ([]*toolDraft, []Tool) {
	run := &RunReport{Command: opts.RunCommand, Published: opts.Published,
		NotInCode: []string{}, NotPublished: []string{}, Disagreements: []Disagreement{}}
	if run.Command == nil {
		run.Command = []string{}
	}
	rep.Run = run
	pub := map[string]*PublishedTool{}
	for i := range opts.Published {
		p := &opts.Published[i]
		if _, dup := pub[p.Name]; !dup {
			pub[p.Name] = p
		}
	}
	have := map[string]bool{}
	notPub := map[string]bool{}
	for _, dr := range drafts {
		have[dr.tool.Name] = true
		if p, ok := pub[dr.tool.Name]; ok {
			dr.pub = p
		} else {
			notPub[dr.tool.Name] = true
		}
	}
	for n := range notPub {
		run.NotPublished = append(run.NotPublished, n)
	}
	sort.Strings(run.NotPublished)

	var only []Tool
	for _, p := range opts.Published {
		if have[p.Name] {
			continue
		}
		have[p.Name] = true
		if dr := findLiteral(files, p.Name); dr != nil {
			dr.pub = pub[p.Name]
			drafts = append(drafts, dr)
			continue
		}
		run.NotInCode = append(run.NotInCode, p.Name)
		only = append(only, publishedOnly(pub[p.Name], run))
	}
	return drafts, only
}

// findLiteral looks for a published name as a quoted string in the code, preferring a place
// with a tool's shape (a description and a schema nearby), and makes a declaration there.
func findLiteral(files []fileResult, name string) *toolDraft {
	if !validToolName(name) {
		return nil
	}
	var first *toolDraft
	for _, f := range files {
		s := f.src
		for _, q := range []string{`"`, `'`, "`"} {
			lit := []byte(q + name + q)
			for i := 0; ; {
				j := bytes.Index(s.text[i:], lit)
				if j < 0 {
					break
				}
				off := i + j
				i = off + len(lit)
				if s.inComment(off) || s.inBlockComment(off) {
					continue
				}
				line := s.lineOf(off)
				from, to := s.shapeBlock(off, line)
				d := decl{name: name, style: "published name found in code", line: line, from: from, to: to}
				dr := &toolDraft{d: d, src: s, calls: map[string]bool{},
					tool:  Tool{Name: name, File: s.rel, Line: line, Language: s.lang, Style: d.style},
					spans: []span{{s, from, to}}}
				body := s.text[s.starts[from-1]:endOffset(s, to)]
				if shapeDescRe.Match(body) && shapeSchemaRe.Match(body) {
					return dr
				}
				if first == nil {
					first = dr
				}
			}
		}
	}
	return first
}

// publishedOnly classifies a tool known only from the server's list, from its name and its
// published annotations.
func publishedOnly(p *PublishedTool, run *RunReport) Tool {
	yes := true
	t := Tool{Name: p.Name, Style: "published only: name not found in code", Published: &yes,
		Annotations: p.Annotations, Evidence: []Site{}, Guards: []Site{}}
	c := classifyName(p.Name)
	switch {
	case p.Annotations.saysEffect():
		t.Candidate = true
		t.Reason = "published " + annotationText(p.Annotations) + "; not found in code"
	case c.vetoed:
		t.Reason = fmt.Sprintf("read verb %q leads the name; not found in code", c.read[0])
	case len(c.effect) > 0 && p.Annotations.saysReadOnly():
		t.Reason = "effect words in the name (" + strings.Join(c.effect, ", ") + "), but published readOnlyHint: true; not found in code"
	case len(c.effect) > 0:
		t.Candidate = true
		t.Reason = "effect words in the name: " + strings.Join(c.effect, ", ") + "; not found in code"
	default:
		t.Reason = "no effect or read words in the name; not found in code"
	}
	t.Money = t.Candidate && len(c.money) > 0
	t.CodeSuggests = "not found in code"
	return t
}

// classifyWithPublished classifies a tool from its code, then, under --run, weighs the
// published annotations and records where they and the code disagree.
func classifyWithPublished(dr *toolDraft, rep *Report) {
	if dr.pub == nil {
		classify(dr, rep)
		if rep.Run != nil {
			no := false
			dr.tool.Published = &no
		}
		return
	}
	p := dr.pub
	dr.pub = nil
	classify(dr, rep)
	codeCand, codeReason := dr.tool.Candidate, dr.tool.Reason
	dr.pub = p
	classify(dr, rep)
	yes := true
	t := &dr.tool
	t.Published, t.Annotations = &yes, p.Annotations
	t.CodeSuggests = verdictText(codeCand, codeReason)
	a := p.Annotations
	if a.saysEffect() && !t.Candidate {
		t.Candidate = true
		t.Reason = "published " + annotationText(a) + "; the code alone: " + codeReason
	}
	switch {
	case a.saysReadOnly() && codeCand:
		rep.Run.Disagreements = append(rep.Run.Disagreements, Disagreement{Tool: t.Name,
			Annotation: annotationText(a), Code: t.CodeSuggests})
	case a.saysEffect() && !codeCand:
		rep.Run.Disagreements = append(rep.Run.Disagreements, Disagreement{Tool: t.Name,
			Annotation: annotationText(a), Code: t.CodeSuggests})
	}
}

func verdictText(cand bool, reason string) string {
	if cand {
		return "candidate: " + reason
	}
	return "not a candidate: " + reason
}
