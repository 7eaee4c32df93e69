package policy

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParse: whatever the file holds, Parse returns a policy or Errors and never panics;
// every error it reports is on a line of the file as YAML counts lines (or on line 0, the file
// as a whole), and the same file with CRLF line ends gets the same verdict and errors.
func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	for _, s := range []string{
		"", "version: 1\n", "# c\nversion: 1 # c\n# c\nbogus: 1\n", "version: 1\ntools:\n  c:\n    retries:\n", "version: 1\non_unknown:\n  command: [x]\n  retries:\n",
		"version: 1\ntools:\n  ? [a]\n  : {wait: 1s}\n", "version: 1\ntools: {\"a\": {key: [x]}, \"a\": {}}\n",
		"version: 1\ndefaults: !!map {wait: 1s}\n", "version: 1\ntools:\n  c:\n    key: [a, ~, 1]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		p, err := Parse("f.yaml", src)
		if !bytes.ContainsRune(src, '\r') {
			// The same file with CRLF line ends means the same, errors at the same places.
			_, crlf := Parse("f.yaml", bytes.ReplaceAll(src, []byte("\n"), []byte("\r\n")))
			if (err == nil) != (crlf == nil) || err != nil && err.Error() != crlf.Error() {
				t.Fatalf("LF: %v\nCRLF: %v", err, crlf)
			}
		}
		if err == nil {
			if p == nil {
				t.Fatal("no policy and no error")
			}
			return
		}
		var es Errors
		if !errors.As(err, &es) || len(es) == 0 {
			t.Fatalf("error %T %v, want Errors", err, err)
		}
		// YAML's line breaks: \n, \r\n and a lone \r.
		lines := bytes.Count(src, []byte("\n")) + bytes.Count(src, []byte("\r")) - bytes.Count(src, []byte("\r\n")) + 1
		for _, e := range es {
			if e.Line < 0 || e.Line > lines || e.Msg == "" {
				t.Fatalf("error at line %d of a %d-line file: %v", e.Line, lines, e)
			}
		}
	})
}
