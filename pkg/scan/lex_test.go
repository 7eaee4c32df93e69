package scan

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The one-pass index behind enclosingOpen, inBlockComment and matchClose, and the per-line
// one behind inComment, must answer as the scans from
// the start of the file it replaced (kept here as the reference) did, at every offset of every
// test file and of some unbalanced text. Those scans made a file quadratic in its
// declarations: `effectfence scan` took 18.2 s on a 450 KB file declaring 5,000 tools, 1.1 s
// with the index (measured with the real binary; a test does not time it).
func TestLexIndexAnswersAsTheScanFromTheStart(t *testing.T) {
	texts := map[string]string{
		"unbalanced.ts":  "a(b[c{d)e]f}g)))((( /* x ( */ '(' \"[\" `{` // (\n)",
		"strings.py":     "x = f(\"\"\"(\n[\"\"\", '''{''', # (\n y)\n'unterminated (\nz]",
		"raw.go":         "f(`(\n[`, '(', \"\\\"(\")\n/* { */ }",
		"lifetimes.rs":   "fn f<'a>(x: &'a str) -> char { '(' } // [\n'\\n' (",
		"ruby.rb":        "tool \"x\" do |a| # (\n  f(a[1], \"#{g(2)}\")\nend",
		"empty.ts":       "",
		"only_close.js":  ")))]]]}}}",
		"comment_end.ts": "/* never closed ( [ {",
	}
	err := filepath.WalkDir("testdata", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || langByExt[strings.ToLower(filepath.Ext(p))] == "" {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && len(b) < 64<<10 {
			texts[p] = string(b)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(texts) < 30 {
		t.Fatalf("only %d texts", len(texts))
	}
	for name, text := range texts {
		s := newSource(name, langByExt[strings.ToLower(filepath.Ext(name))], []byte(text))
		ref := newSource(name, s.lang, []byte(text))
		for off := 0; off <= len(text)+1; off++ {
			for _, open := range []byte("([{") {
				if got, want := s.enclosingOpen(off, open), refEnclosingOpen(ref, off, open); got != want {
					t.Fatalf("%s: enclosingOpen(%d, %q) = %d, want %d", name, off, open, got, want)
				}
			}
			if got, want := s.inBlockComment(off), refInBlockComment(ref, off); got != want {
				t.Fatalf("%s: inBlockComment(%d) = %v, want %v", name, off, got, want)
			}
			if off < len(text) {
				if got, want := s.inComment(off), refInComment(ref, off); got != want {
					t.Fatalf("%s: inComment(%d) = %v, want %v", name, off, got, want)
				}
				if got, want := s.matchClose(off), refMatchClose(ref, off); got != want {
					t.Fatalf("%s: matchClose(%d) = %d, want %d", name, off, got, want)
				}
			}
		}
	}
}

func refEnclosingOpen(s *source, off int, open byte) int {
	t := s.text
	var stack []int
	for i := 0; i < off && i < len(t); {
		if j := s.skipString(i); j != i {
			i = j
			continue
		}
		switch t[i] {
		case '(', '[', '{':
			stack = append(stack, i)
		case ')', ']', '}':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
		i++
	}
	for k := len(stack) - 1; k >= 0; k-- {
		if t[stack[k]] == open {
			return stack[k]
		}
	}
	return -1
}

func refInComment(s *source, off int) bool {
	n := s.lineOf(off)
	if commentLine(s.line(n)) {
		return true
	}
	for i := s.starts[n-1]; i < off; {
		j := s.skipString(i)
		if j == i {
			i++
			continue
		}
		c := s.text[i]
		if j > off {
			return c == '/' || c == '#' // inside a comment rather than a string
		}
		i = j
	}
	return false
}

func refMatchClose(s *source, open int) int { return s.scanClose(open) }

func refInBlockComment(s *source, off int) bool {
	for i := 0; i < len(s.text) && i <= off; {
		j := s.skipString(i)
		if j == i {
			i++
			continue
		}
		if j > off {
			rest := s.text[i:]
			return bytes.HasPrefix(rest, []byte("/*")) || s.lang == langPython && (bytes.HasPrefix(rest, []byte(`"""`)) || bytes.HasPrefix(rest, []byte("'''")))
		}
		i = j
	}
	return false
}
