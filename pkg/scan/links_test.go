//go:build unix

package scan

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// A file reached by several paths inside the scanned folder is read once: under its own name
// where the walk reaches it, else under the first link met (its own name is in a folder left
// out by rule). Before, each path was read, and one tool was reported once per path, as
// several candidates. A link that leads back to itself, directly or through another link, is
// a symlink loop, not a broken link.
func TestFileReachedByLinksIsReadOnce(t *testing.T) {
	root := t.TempDir()
	write := func(rel, data string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, rel string) {
		if err := os.Symlink(target, filepath.Join(root, rel)); err != nil {
			t.Fatal(err)
		}
	}
	write("src/pay.ts", `server.tool("send_payment", "Send a payment", {}, async () => { await fetch(u, { method: "POST" }) })`+"\n")
	write("vendor/refund.ts", `server.tool("issue_refund", "Issue a refund", {}, async () => { await fetch(u, { method: "POST" }) })`+"\n")
	link("src/pay.ts", "a-pay.ts") // met before src/pay.ts: replaced by it
	if err := os.Mkdir(filepath.Join(root, "z"), 0o755); err != nil {
		t.Fatal(err)
	}
	link("../src/pay.ts", "z/pay-again.ts")
	link("vendor/refund.ts", "refund.ts")
	link("../vendor/refund.ts", "z/refund-again.ts")
	link("self.ts", "self.ts")
	link("ping.ts", "pong.ts")
	link("pong.ts", "ping.ts")

	rep := scanDir(t, root, Options{})
	where := map[string]string{}
	for _, c := range rep.Candidates {
		if prev, dup := where[c.Name]; dup {
			t.Errorf("%s reported twice: at %s and at %s:%d", c.Name, prev, c.File, c.Line)
		}
		where[c.Name] = c.File
	}
	if want := map[string]string{"send_payment": "src/pay.ts", "issue_refund": "refund.ts"}; !reflect.DeepEqual(where, want) {
		t.Errorf("candidates at %v; want %v", where, want)
	}
	if rep.Files.Scanned != 2 {
		t.Errorf("%d files read; want 2 (each once)", rep.Files.Scanned)
	}
	// vendor/ is left out by rule, and the three other paths to the two files.
	if rep.Files.SkippedByRule != 4 {
		t.Errorf("%d left out by rule; want 4 (vendor/ and three second paths)", rep.Files.SkippedByRule)
	}
	got := map[string]string{}
	for _, s := range rep.Skipped {
		got[s.Path] = s.Reason
	}
	if want := map[string]string{"self.ts": SkipSymlinkLoop, "ping.ts": SkipSymlinkLoop, "pong.ts": SkipSymlinkLoop}; !reflect.DeepEqual(got, want) {
		t.Errorf("skipped %v; want %v", got, want)
	}
}

// A running server's list may name a tool with a megabyte of text: the human report shows
// its first 128 bytes and says how much more there is (the table row was a megabyte wide);
// --json keeps the name whole.
func TestHugePublishedNameIsCutInTheTextReport(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "server.ts"), []byte(`server.tool("send_invoice", "Send", {}, async () => { await fetch(u, { method: "POST" }) })`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	huge := "é" + strings.Repeat("x", 1<<20) // a two-byte character first: the cut must not split one
	rep := scanDir(t, root, Options{Published: []PublishedTool{{Name: huge}, {Name: "send_invoice"}}, RunCommand: []string{"node", "server.js"}})
	var text bytes.Buffer
	if err := WriteText(&text, rep, false); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(text.String(), "\n") {
		if len(l) > 1000 {
			t.Logf("long line: %.300s", l)
		}
	}
	if text.Len() > 64<<10 {
		t.Errorf("the text report is %d bytes for one huge published name; want it cut short", text.Len())
	}
	if want := "é" + strings.Repeat("x", 126) + "… (" + itoa(len(huge)-128) + " bytes more; --json has it whole)"; !strings.Contains(text.String(), want) {
		t.Errorf("the report does not show the name's first 128 bytes and the count of the rest:\n%.2000s", text.String())
	}
	if !utf8.Valid(text.Bytes()) {
		t.Error("the text report is not valid UTF-8: the cut split a character")
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), strings.Repeat("x", 1<<20)) {
		t.Error("--json does not keep the published name whole")
	}
}

// File names that are not UTF-8 are reported with \xNN for each byte that is not, in --json
// as in the text, and a note says so: encoding/json wrote U+FFFD for each, so two names that
// differ in one such byte came out alike. The files are read as any other.
func TestNamesNotUTF8AreEscapedNotReplaced(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"pay\x80.ts", "pay\x81.ts"} {
		body := `server.tool("send_` + map[byte]string{0x80: "payment", 0x81: "refund"}[name[3]] + `", "Send it", {}, async () => { await fetch(u, { method: "POST" }) })` + "\n"
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Skipf("this file system refuses a name that is not UTF-8: %v", err)
		}
	}
	if err := os.Mkdir(filepath.Join(root, "d\xff"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "d\xff", "x.ts"), []byte(`server.tool("delete_user", "Delete a user", {}, async () => { await fetch(u, { method: "DELETE" }) })`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := scanDir(t, root, Options{})
	where := map[string]string{}
	for _, c := range rep.Candidates {
		where[c.Name] = c.File
	}
	if want := map[string]string{"send_payment": `pay\x80.ts`, "send_refund": `pay\x81.ts`, "delete_user": `d\xff/x.ts`}; !reflect.DeepEqual(where, want) {
		t.Errorf("candidates at %q; want %q", where, want)
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(js.String(), `\ufffd`) || strings.Contains(js.String(), "\ufffd") {
		t.Errorf("--json replaced a byte with U+FFFD:\n%s", js.String())
	}
	if !strings.Contains(js.String(), `"pay\\x80.ts"`) || !strings.Contains(js.String(), `"pay\\x81.ts"`) {
		t.Errorf("--json does not name both files apart:\n%s", js.String())
	}
	var note *Note
	for i := range rep.Notes {
		if rep.Notes[i].Kind == "names_not_utf8" {
			note = &rep.Notes[i]
		}
	}
	if note == nil || !reflect.DeepEqual(note.Files, []string{`d\xff`, `pay\x80.ts`, `pay\x81.ts`}) || !strings.HasPrefix(note.Text, "3 file or folder name(s) are not UTF-8") {
		t.Errorf("note %+v; want names_not_utf8 naming the folder and both files", note)
	}
	// SARIF names a file by a URI, which carries the bytes themselves, not their escape.
	var sarif bytes.Buffer
	if err := WriteSARIF(&sarif, rep, "test"); err != nil {
		t.Fatal(err)
	}
	for _, uri := range []string{`"uri": "pay%80.ts"`, `"uri": "pay%81.ts"`, `"uri": "d%FF/x.ts"`} {
		if !strings.Contains(sarif.String(), uri) {
			t.Errorf("SARIF lacks %s:\n%s", uri, sarif.String())
		}
	}
}
