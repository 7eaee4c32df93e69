package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostilePolicyFilesRefusedByTheBinary: docs/policy.md promises that nothing in a policy
// file is ignored and that some files are refused whole before they are parsed. Each hostile
// file here goes to the real binary twice: `policy check` (exit 2, every error as
// file:line:col: message on stderr, nothing on stdout) and `wrap --policy` (exit 2 before the
// server command runs: its marker file is never written; nothing on stdout, the protocol
// channel). No run may panic or take the file for a policy.
func TestHostilePolicyFilesRefusedByTheBinary(t *testing.T) {
	t.Parallel()
	// A "billion laughs": nine levels of nine aliases each, 387 million strings if expanded.
	laughs := "version: 1\nscope: &l0 lol\n"
	for i := 1; i <= 9; i++ {
		laughs += fmt.Sprintf("l%d: &l%d [%s*l%d]\n", i, i, strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 8), i-1)
	}
	var sb strings.Builder // appended to, not concatenated: the latter copied 60 GB to make 2 MiB
	sb.WriteString("version: 1\ntools:\n")
	for i := 0; sb.Len() <= 2<<20; i++ {
		fmt.Fprintf(&sb, "  tool_%07d:\n    key: [order_id]\n", i)
	}
	big := sb.String()
	for _, c := range []struct {
		name, src string
		want      []string // what stderr holds, in order; ":line:col: …" follows the file's path
	}{
		{"aliases bomb", laughs, []string{":2:8: anchors and aliases are not supported"}},
		{"duplicate keys", "version: 1\ntools:\n  charge: {key: [order_id]}\n  charge: {fence: false}\n", []string{`:4:3: "charge" is given twice in tools (first at line 3, column 3)`}},
		{"wrong types", "version: 1\ntools:\n  c:\n    fence: yes\n    wait: 30\n    key: order_id\n", []string{":4:12: fence must be true or false", ":5:11: wait must be a duration", ":6:10: key must be a list"}},
		{"over 1 MiB", big, []string{": the file is larger than 1 MiB"}},
		{"NUL byte", "version: 1\ntools:\n  charge:\x00\n    fence: true\n", []string{":3:10: the file holds U+0000, a control character"}},
		{"terminal escape", "version: 1\ntools:\n  charge:\n    fence: false # \x1b[2K\r", []string{":4:20: the file holds U+001B, a control character"}},
		{"zero-width space", "version: 1\ntools:\n  charge\u200b:\n    redact: [card.number]\n", []string{":3:9: the file holds U+200B, an invisible format character"}},
		{"line separator ending a comment", "version: 1\ntools:\n  charge:\n    key: [order_id]\n    # card data\u2028    redact: [card.number]\n", []string{":5:16: the file holds U+2028, a line or paragraph separator"}},
		{"no-break space before a '#'", "version: 1\ntools:\n  charge:\n    redact:\n      - card.number\u00a0# the PAN\n", []string{":5:20: redact: \"card.number\\u00a0# the PAN\" has U+00A0 before '#'"}},
		{"not UTF-8", "version: 1\nscope: \xff\xfe\n", []string{":2:8: the file is not UTF-8 text"}},
		{"nested 1000 deep", "version: 1\ntools: " + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + "\n", []string{":2:", "nested more than 100 deep"}},
		{"merge key and tag", "version: 1\ntools:\n  c:\n    <<: {wait: 1s}\n  d:\n    wait: !!str 1s\n", []string{":4:5: merge keys (<<) are not supported", ":6:11: YAML tags are not supported"}},
		{"two documents", "version: 1\n---\nversion: 1\nfence_reads: true\n", []string{":3:1: a policy file holds one YAML document"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "policy.yaml")
			if err := os.WriteFile(file, []byte(c.src), 0o600); err != nil {
				t.Fatal(err)
			}
			check := runBinary(t, nil, "", "policy", "check", file)
			marker := filepath.Join(dir, "server-started")
			env := []string{"XDG_STATE_HOME=" + filepath.Join(dir, "state"), "EFFECTFENCE_POLICY=", "EFFECTFENCE_LEDGER="}
			wrapped := runBinary(t, env, "", "wrap", "--ledger", "memory", "--policy", file, "--", "sh", "-c", `echo > "$0"`, marker)
			for _, r := range []struct {
				what string
				res  result
				all  bool // every error is listed
			}{{"policy check", check, true}, {"wrap", wrapped, false}} {
				if r.res.code != exitUsage || r.res.stdout != "" || strings.Contains(r.res.stderr, "panic") || strings.Contains(r.res.stderr, "goroutine ") {
					t.Fatalf("%s: exit %d, stdout %q, stderr:\n%.2000s", r.what, r.res.code, r.res.stdout, r.res.stderr)
				}
				want := c.want
				if !r.all {
					want = want[:1]
				}
				rest := r.res.stderr
				for _, w := range want {
					if strings.HasPrefix(w, ":") { // a position in the file, not a fragment of a message
						w = file + w
					}
					i := strings.Index(rest, w)
					if i < 0 {
						t.Fatalf("%s: stderr:\n%.2000s\nwant (in order) %q", r.what, r.res.stderr, w)
					}
					rest = rest[i+len(w):]
				}
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("wrap started the server with a policy it refuses")
			}
		})
	}
}
