package scan

import (
	"bytes"
	"regexp"
	"strings"
)

// The repository index: named string constants (to resolve tool names given through
// constants and enums), function definitions (to follow handlers into helpers), and dispatch
// branches (case "x": / if name == X:) where low-level servers run each tool.

var (
	constRe = regexp.MustCompile(`(?m)^[ \t]*(?:export\s+)?(?:(?:public|private|protected|static|final|const|let|var|pub|readonly|internal)\s+)*(?:[\w<>\[\]]+\s+)??([A-Za-z_]\w*)\s*(?::\s*[\w&'<> ]+?\s*)?(?:=|:)\s*(["'` + "`" + `])([\w\-./:]{1,100})["'` + "`" + `]\s*[,;]?[ \t]*(?://.*|#.*)?\r?$`)
	// Go typed constants: Echo ToolName = "echo" (in a const block or after const)
	goTypedConstRe = regexp.MustCompile(`^[ \t]*(?:const\s+)?([A-Za-z_]\w*)\s+[A-Za-z_][\w.]*\s*=\s*("|` + "`" + `)([\w\-./:]{1,100})["` + "`" + `]\s*(?://.*)?\r?$`)
	containerRe    = regexp.MustCompile(`\b(?:class|enum|const|let|var|object|module|type|struct|interface)\s+([A-Za-z_]\w*)`)

	funcDefRes = map[string][]funcPattern{
		langPython: {{regexp.MustCompile(`^[ \t]*(?:async\s+)?def\s+(\w+)\s*\(`), []string{"def"}}},
		langJS: {
			{regexp.MustCompile(`^[ \t]*(?:export\s+)?(?:default\s+)?(?:async\s+)?function\s*\*?\s*(\w+)\s*[(<]`), []string{"function"}},
			{regexp.MustCompile(`^[ \t]*(?:export\s+)?(?:const|let|var)\s+(\w+)\s*(?::[^=\n]+)?=\s*(?:async\s+)?(?:function\b|\(|\w+\s*=>)`), []string{"const", "let", "var"}},
			{regexp.MustCompile(`^[ \t]+(?:(?:public|private|protected|static|async|override)\s+)*(\w+)\s*\([^;{}]*\)\s*(?::\s*[^{;=]+)?\{[ \t]*$`), []string{") {", "){", "> {"}},
		},
		langGo:   {{regexp.MustCompile(`^func\s+(?:\([^)]*\)\s*)?(\w+)\s*[(\[]`), []string{"func"}}},
		langRust: {{regexp.MustCompile(`^[ \t]*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?fn\s+(\w+)`), []string{"fn"}}},
		langJava: {{regexp.MustCompile(`^[ \t]+(?:(?:public|private|protected|static|final|synchronized|abstract)\s+)+[\w<>\[\],.? ]+?\s+(\w+)\s*\(`), []string{"public", "private", "protected", "static"}}},
		langRuby: {{regexp.MustCompile(`^[ \t]*def\s+(?:self\.)?(\w+[?!]?)`), []string{"def"}}},
	}

	// dispatch branches: case "x": / when "x" / case Enum.X: ; name == "x" / .equals("x") ;
	// "x" => (match arms)
	caseRe  = regexp.MustCompile(`\b(?:case|when)\s+(["'` + "`" + `]?)([A-Za-z_][\w\-./]*(?:::\w+)*)["'` + "`" + `]?\s*(?:[:)]|=>|then\b|\{|$)`)
	equalRe = regexp.MustCompile(`(?:={2,3}\s*|\.equals\(\s*)(["'` + "`" + `]?)([A-Za-z_][\w\-./]*(?:::\w+)*)["'` + "`" + `]?\s*(?:[:)]|=>|then\b|\{|$)`)
	armRe   = regexp.MustCompile(`^[ \t]*(["'])([\w\-./:]+)["']\s*=>`)
)

// funcPattern finds function definitions on lines holding one of its triggers.
type funcPattern struct {
	re       *regexp.Regexp
	triggers []string
}

// want reports whether a line may hold this pattern: one of the triggers, and not a
// control-flow statement (`if (x) {` looks like a method to a regexp).
func (fp funcPattern) want(l []byte) bool {
	hit := false
	for _, tr := range fp.triggers {
		if bytes.Contains(l, []byte(tr)) {
			hit = true
			break
		}
	}
	if !hit {
		return false
	}
	t := bytes.TrimLeft(l, " \t")
	for _, kw := range controlWords {
		if bytes.HasPrefix(t, kw) {
			return false
		}
	}
	return true
}

var controlWords = [][]byte{[]byte("if "), []byte("if("), []byte("for "), []byte("for("), []byte("while"),
	[]byte("switch"), []byte("catch"), []byte("} else"), []byte("else"), []byte("return ")}

type constDef struct {
	key, qualified, value string
	global                bool // visible to other files; top-level common words (name) are not
}

// fileConsts collects NAME = "value" definitions of a file, with the name of the enclosing
// class/enum/object when the definition is indented under one.
func fileConsts(s *source) []constDef {
	var out []constDef
	ms := s.findLinesWhere(constRe, constCandidate)
	if s.lang == langGo {
		ms = append(ms, s.findLinesWhere(goTypedConstRe, constCandidate)...)
	}
	for _, m := range ms {
		key := string(s.text[m[2]:m[3]])
		n := s.lineOf(m[0])
		w := indent(s.line(n))
		c := constDef{key: key, value: string(s.text[m[6]:m[7]]), global: true}
		switch key {
		case "name", "description", "method", "type", "title", "version", "id", "url", "path", "default":
			// `const name = "echo"` at the top of a file names that file's tool; the same
			// key inside objects is a field, not a constant
			if w != 0 {
				continue
			}
			c.global = false
		}
		if w > 0 {
			for k := n - 1; k >= 1 && k > n-400; k-- {
				l := s.line(k)
				if iw := indent(l); iw >= 0 && iw < w {
					if cm := containerRe.FindStringSubmatch(l); cm != nil {
						c.qualified = cm[1] + "." + key
					}
					break
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// constCandidate cheaply rejects lines that cannot define a string constant.
func constCandidate(l []byte) bool {
	return len(l) < 300 && bytes.ContainsAny(l, "\"'`") && bytes.ContainsAny(l, "=:")
}

// funcDef is a function or method definition and the lines of its body.
type funcDef struct {
	name     string
	file     *source
	from, to int
}

func fileFuncs(s *source) []funcDef {
	var out []funcDef
	for _, fp := range funcDefRes[s.lang] {
		for _, m := range s.findLinesWhere(fp.re, fp.want) {
			name := string(s.text[m[2]:m[3]])
			switch name {
			case "if", "for", "while", "switch", "catch", "function", "return", "constructor":
				continue
			}
			var from, to int
			switch s.lang {
			case langPython:
				from, to = s.pyFuncBlock(m[0])
			case langRuby:
				from = s.lineOf(m[0])
				to = s.rubyBlockEnd(from)
			default:
				from, to = s.braceBodyAfter(m[2])
			}
			out = append(out, funcDef{name: name, file: s, from: from, to: to})
		}
	}
	return out
}

// dispatchSite is a branch that runs one tool in a low-level server's call handler.
type dispatchSite struct {
	key      string // the literal or the reference's last segment
	file     *source
	from, to int
}

func fileDispatch(s *source) []dispatchSite {
	var out []dispatchSite
	var ms [][]int
	ms = append(ms, s.findLines(caseRe, "case", "when")...)
	ms = append(ms, s.findLines(equalRe, "==", "equals(")...)
	ms = append(ms, s.findLinesWhere(armRe, func(l []byte) bool {
		t := bytes.TrimLeft(l, " \t")
		return len(t) > 0 && (t[0] == '"' || t[0] == '\'') && bytes.Contains(l, []byte("=>"))
	})...)
	for _, m := range ms {
		key := string(s.text[m[4]:m[5]])
		if i := strings.LastIndexAny(key, ".:"); i >= 0 && m[2] >= 0 && m[3] == m[2] {
			key = key[i+1:] // GitTools.STATUS -> STATUS; literals keep their dots
		}
		n := s.lineOf(m[0])
		l := s.line(n)
		if commentLine(l) {
			continue
		}
		to := s.indentBlockEnd(n, indent(l))
		if s.lang != langPython && s.lang != langRuby {
			if b := strings.IndexByte(l[min(len(l), m[1]-s.starts[n-1]):], '{'); b >= 0 {
				if c := s.matchClose(m[1] + b); c > 0 {
					to = max(to, s.lineOf(c))
				}
			}
		}
		if to-n > 400 {
			to = n + 400
		}
		out = append(out, dispatchSite{key: key, file: s, from: n, to: to})
	}
	return out
}
