package policy

import (
	"strings"
	"testing"
)

// The hook URLs the parser takes (a scheme in any case, as RFC 3986 reads it; a loopback IPv6
// literal of any spelling; a query right after the host) are valid under the schema too, so
// an editor does not flag a file `policy check` takes; and the one it refuses still is.
func TestSchemaTakesTheHookURLsTheParserTakes(t *testing.T) {
	s := compileSchema(t)
	for _, u := range []string{
		"HTTPS://hooks.example.com/effectfence",
		"Https://hooks.example.com/effectfence",
		"HTTP://localhost:8080/hook",
		"http://[0:0:0:0:0:0:0:1]:9000/hook",
		"http://[::ffff:127.0.0.1]/hook",
		"http://localhost?team=payments",
		"http://LOCALHOST:8080/hook", // host names are not case-sensitive (refused before 2026-12-06)
	} {
		src := "version: 1\non_unknown:\n  url: " + u + "\n"
		if _, err := Parse("x.yaml", []byte(src)); err != nil {
			t.Fatalf("the parser refuses %s: %v", u, err)
		}
		if err := validate(t, s, []byte(src)); err != nil {
			t.Errorf("the schema refuses %s, which policy check takes: %v", u, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	for _, u := range []string{"http://pager.example.com/x", "HTTP://pager.example.com/x", "ftp://h/x"} {
		src := "version: 1\non_unknown:\n  url: " + u + "\n"
		if _, err := Parse("x.yaml", []byte(src)); err == nil {
			t.Errorf("the parser takes %s", u)
		}
		if err := validate(t, s, []byte(src)); err == nil {
			t.Errorf("the schema takes %s", u)
		}
	}
}
