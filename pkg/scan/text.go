package scan

import (
	"bytes"
	"regexp"
	"sort"
	"strings"
	"sync"
)

// Language names used in reports.
const (
	langJS     = "ts/js"
	langPython = "python"
	langGo     = "go"
	langRust   = "rust"
	langJava   = "java"
	langRuby   = "ruby"
)

// source is one file's text with a line index.
type source struct {
	rel    string // path relative to the scan root, slash-separated
	lang   string
	text   []byte
	str    string // text as a string, made once: line slices it instead of copying the line
	starts []int  // offset of the first byte of each line

	descSum, schemaSum []int32 // lines holding description / schema markers, as prefix sums (generic.go)

	lexOnce sync.Once
	lex     lexIndex // built on first use by enclosingOpen, inBlockComment and matchClose

	annotations map[[2]int][2]bool // per declaration extent, see annotated (assemble only)
	lines       map[int]*lineLex   // per line, see inComment; one goroutine uses a source at a time
}

// lexIndex is one pass over a file's text that skips strings and comments as skipString does:
// the regions it skipped, and the brackets outside them with what is open after each and
// where each closes. enclosingOpen and inBlockComment each used to make that pass from the
// start of the file for every query, and matchClose to the end of the file for every unclosed
// bracket, which made a file quadratic in its declarations (a 450 KB file declaring 5,000
// tools took 18 s).
type lexIndex struct {
	skips  []skipRegion
	events []int   // offsets of the brackets outside strings and comments, ascending
	after  []int32 // after each event, the innermost bracket still open (an index into opens), or -1
	opens  []openBracket
}

type skipRegion struct {
	from, to int  // [from, to)
	block    bool // a /* */ comment, or a Python triple-quoted string
}

type openBracket struct {
	parent  int32
	close   int    // the offset of the bracket that closes it, or -1
	nearest [3]int // per kind ( [ {: the offset of the innermost open bracket of that kind, this one included, or -1
}

func bracketKind(c byte) int {
	switch c {
	case '(':
		return 0
	case '[':
		return 1
	}
	return 2
}

func (s *source) lexed() *lexIndex {
	s.lexOnce.Do(func() {
		t := s.text
		lx := &s.lex
		top := int32(-1)
		for i := 0; i < len(t); {
			if j := s.skipString(i); j != i {
				rest := t[i:]
				block := bytes.HasPrefix(rest, []byte("/*")) || s.lang == langPython && (bytes.HasPrefix(rest, []byte(`"""`)) || bytes.HasPrefix(rest, []byte("'''")))
				lx.skips = append(lx.skips, skipRegion{i, j, block})
				i = j
				continue
			}
			switch c := t[i]; c {
			case '(', '[', '{':
				ob := openBracket{parent: top, close: -1, nearest: [3]int{-1, -1, -1}}
				if top >= 0 {
					ob.nearest = lx.opens[top].nearest
				}
				ob.nearest[bracketKind(c)] = i
				lx.opens = append(lx.opens, ob)
				top = int32(len(lx.opens) - 1)
				lx.events, lx.after = append(lx.events, i), append(lx.after, top)
			case ')', ']', '}':
				if top >= 0 {
					lx.opens[top].close = i
					top = lx.opens[top].parent
				}
				lx.events, lx.after = append(lx.events, i), append(lx.after, top)
			}
			i++
		}
	})
	return &s.lex
}

func newSource(rel, lang string, text []byte) *source {
	starts := []int{0}
	for i, b := range text {
		if b == '\n' && i+1 < len(text) {
			starts = append(starts, i+1)
		}
	}
	return &source{rel: rel, lang: lang, text: text, str: string(text), starts: starts}
}

// findLines runs re over each line that holds one of the trigger strings (every line when
// none are given) and returns submatch indices as offsets into the whole text. Running a
// regexp per candidate line is much faster than over the whole file, and every pattern the
// scanner uses ends on the line it starts on.
func (s *source) findLines(re *regexp.Regexp, triggers ...string) [][]int {
	if len(triggers) == 0 {
		return s.findLinesWhere(re, func([]byte) bool { return true })
	}
	tb := make([][]byte, len(triggers))
	for i, t := range triggers {
		tb[i] = []byte(t)
	}
	return s.findLinesWhere(re, func(l []byte) bool {
		for _, t := range tb {
			if bytes.Contains(l, t) {
				return true
			}
		}
		return false
	})
}

// findLinesWhere is findLines with a predicate choosing the lines to match.
func (s *source) findLinesWhere(re *regexp.Regexp, want func(line []byte) bool) [][]int {
	var out [][]int
	for n := range s.starts {
		start := s.starts[n]
		end := len(s.text)
		if n+1 < len(s.starts) {
			end = s.starts[n+1] - 1
		}
		l := s.text[start:end]
		if !want(l) {
			continue
		}
		for _, m := range re.FindAllSubmatchIndex(l, -1) {
			for i := range m {
				if m[i] >= 0 {
					m[i] += start
				}
			}
			out = append(out, m)
		}
	}
	return out
}

// lineOf returns the 1-based line number holding byte offset off.
func (s *source) lineOf(off int) int {
	return sort.Search(len(s.starts), func(i int) bool { return s.starts[i] > off })
}

// line returns the text of 1-based line n without its newline.
func (s *source) line(n int) string {
	if n < 1 || n > len(s.starts) {
		return ""
	}
	start := s.starts[n-1]
	end := len(s.text)
	if n < len(s.starts) {
		end = s.starts[n] - 1
	}
	if end > start && s.text[end-1] == '\r' {
		end--
	}
	// A slice of str, not a copy: a line is asked for once per match on it, and a copy per
	// match made a long line quadratic (a 1 MiB line of 58,000 registrations took 39 s).
	return s.str[start:end]
}

func (s *source) lineCount() int { return len(s.starts) }

// hashComments reports whether '#' starts a comment in the file's language.
func (s *source) hashComments() bool { return s.lang == langPython || s.lang == langRuby }

// skipString returns the offset just past the string literal or comment starting at i, or
// i itself if none starts there. It understands the quoting of every scanned language well
// enough for bracket matching: '"', '\”, '`', Python triple quotes, Rust lifetimes (which
// are not strings), and //, /* */ and # comments.
func (s *source) skipString(i int) int {
	t := s.text
	n := len(t)
	c := t[i]
	switch {
	case c == '/' && i+1 < n && t[i+1] == '/' && !s.hashComments():
		for i < n && t[i] != '\n' {
			i++
		}
		return i
	case c == '/' && i+1 < n && t[i+1] == '*' && !s.hashComments():
		for j := i + 2; j+1 < n; j++ {
			if t[j] == '*' && t[j+1] == '/' {
				return j + 2
			}
		}
		return n
	case c == '/' && s.lang == langJS && regexMayStart(t, i):
		// a regular expression literal (/`/g, /"/): its quotes open no string. It ends on
		// its line; a / that finds no end there is a division after all.
		class := false
		for j := i + 1; j < n; j++ {
			switch t[j] {
			case '\\':
				if j+1 < n && t[j+1] == '\n' {
					return i
				}
				j++
			case '[':
				class = true
			case ']':
				class = false
			case '/':
				if !class {
					return j + 1
				}
			case '\n':
				return i
			}
		}
		return i
	case c == '#' && s.hashComments():
		// Ruby "#{" only occurs inside strings, which are skipped whole.
		for i < n && t[i] != '\n' {
			i++
		}
		return i
	case c == '"' || c == '`' || (c == '\'' && s.lang != langRust):
		if s.lang == langPython && i+2 < n && t[i+1] == c && t[i+2] == c {
			for j := i + 3; j+2 < n; j++ {
				if t[j] == '\\' {
					j++
					continue
				}
				if t[j] == c && t[j+1] == c && t[j+2] == c {
					return j + 3
				}
			}
			return n
		}
		for j := i + 1; j < n; j++ {
			switch t[j] {
			case '\\':
				if c != '`' || s.lang != langGo {
					j++
				}
			case c:
				return j + 1
			case '\n':
				if c != '`' && s.lang != langRust && s.lang != langRuby {
					return j // unterminated on this line: stop here rather than eat the file
				}
			}
		}
		return n
	case c == '\'' && s.lang == langRust:
		// char literal 'x' or '\n'; a lifetime 'a is left alone
		if i+2 < n && t[i+1] != '\\' && t[i+2] == '\'' {
			return i + 3
		}
		if i+1 < n && t[i+1] == '\\' {
			for j := i + 2; j < n && j < i+12; j++ {
				if t[j] == '\'' {
					return j + 1
				}
			}
		}
	}
	return i
}

// regexMayStart reports whether a / at i in JavaScript begins a regular expression literal
// rather than a division: it follows an operator, an opening bracket, a separator or a
// keyword, never a value (a name, a number, a closing bracket).
func regexMayStart(t []byte, i int) bool {
	k := i - 1
	for k >= 0 && (t[k] == ' ' || t[k] == '\t' || t[k] == '\r' || t[k] == '\n') {
		k--
	}
	if k < 0 {
		return true
	}
	if bytes.IndexByte([]byte("(,=:[!&|?{};+-*%>~^"), t[k]) >= 0 {
		return true
	}
	e := k + 1
	for k >= 0 && (t[k] >= 'a' && t[k] <= 'z' || t[k] >= 'A' && t[k] <= 'Z' || t[k] >= '0' && t[k] <= '9' || t[k] == '_' || t[k] == '$') {
		k--
	}
	switch string(t[k+1 : e]) {
	case "return", "typeof", "case", "yield", "await", "void", "delete", "throw", "in", "of", "else", "do", "instanceof", "new":
		return k < 0 || t[k] != '.'
	}
	return false
}

// matchClose returns the offset of the bracket closing the one at open ('(', '[' or '{'),
// skipping strings and comments, or -1 when it is not closed.
func (s *source) matchClose(open int) int {
	t := s.text
	if open >= 0 && open < len(t) && (t[open] == '(' || t[open] == '[' || t[open] == '{') {
		// a bracket the file's own pass saw (not inside a string or comment): its pair is
		// known, and an unclosed one is not scanned to the end of the file every time
		lx := s.lexed()
		if k := sort.SearchInts(lx.events, open); k < len(lx.events) && lx.events[k] == open {
			return lx.opens[lx.after[k]].close
		}
	}
	return s.scanClose(open)
}

// scanClose is matchClose by a scan from open to the pair, without the file's index: for a
// bracket the file's pass did not see (an offset inside a string or comment).
func (s *source) scanClose(open int) int {
	t := s.text
	depth := 0
	for i := open; i < len(t); {
		if j := s.skipString(i); j != i {
			i = j
			continue
		}
		switch t[i] {
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return -1
}

// enclosingOpen returns the offset of the innermost unclosed bracket of kind open that
// contains off, scanning forward from the start of the file, or -1.
func (s *source) enclosingOpen(off int, open byte) int {
	lx := s.lexed()
	k := sort.SearchInts(lx.events, off) // the events before off
	if k == 0 || lx.after[k-1] < 0 {
		return -1
	}
	return lx.opens[lx.after[k-1]].nearest[bracketKind(open)]
}

// indent returns the indentation width of a line (tabs count as 4).
func indent(line string) int {
	w := 0
	for _, r := range line {
		switch r {
		case ' ':
			w++
		case '\t':
			w += 4
		default:
			return w
		}
	}
	return -1 // blank
}

// indentBlockEnd returns the last line of the block headed by line head: the following
// lines indented deeper than base. Blank lines inside the block belong to it, and so do the
// lines that begin inside a Python triple-quoted string or a /* */ comment begun on an
// earlier line (SQL written from column 0): their indentation is text, not code. A line that
// holds only a # comment does not end a block either, as it does not in Python.
func (s *source) indentBlockEnd(head, base int) int {
	last := head
	for n := head + 1; n <= s.lineCount(); n++ {
		l := s.line(n)
		w := indent(l)
		if w < 0 || s.inMultilineSkip(s.starts[n-1]) || s.hashComments() && strings.HasPrefix(strings.TrimLeft(l, " \t"), "#") {
			continue
		}
		if w <= base {
			break
		}
		last = n
	}
	return last
}

// inMultilineSkip reports whether off lies inside a Python triple-quoted string or a /* */
// comment that began before it.
func (s *source) inMultilineSkip(off int) bool {
	lx := s.lexed()
	k := sort.Search(len(lx.skips), func(i int) bool { return lx.skips[i].from >= off }) - 1
	return k >= 0 && lx.skips[k].to > off && lx.skips[k].block
}

// rubyBlockEnd returns the line of the `end` closing a block opened at line head, found by
// indentation: the first later line that is `end` at the head's indentation.
func (s *source) rubyBlockEnd(head int) int {
	base := indent(s.line(head))
	for n := head + 1; n <= s.lineCount(); n++ {
		l := s.line(n)
		w := indent(l)
		if w < 0 {
			continue
		}
		if w < base {
			return n - 1
		}
		if w == base {
			if strings.HasPrefix(trimLeft(l), "end") {
				return n
			}
			return n - 1
		}
	}
	return s.lineCount()
}

func trimLeft(l string) string {
	for i, r := range l {
		if r != ' ' && r != '\t' {
			return l[i:]
		}
	}
	return ""
}
