package policy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/effectfence/effectfence/pkg/scan"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// Source describes what a generated policy was made from, for its header.
type Source struct {
	// Server is how the server was reached, e.g. the shell-quoted command.
	Server string
	// Scan is what `effectfence scan` found in the server's code (nil: no scan).
	Scan *scan.Report
	// ScanPath is the path that was scanned.
	ScanPath string
}

// publishedTool is what Generate reads of one tool of a tools/list page.
type publishedTool struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Annotations struct {
		ReadOnlyHint    *bool `json:"readOnlyHint"`
		DestructiveHint *bool `json:"destructiveHint"`
		IdempotentHint  *bool `json:"idempotentHint"`
		OpenWorldHint   *bool `json:"openWorldHint"`
	} `json:"annotations"`
}

// asSpelled reads the name and hints of t again from its entry raw (valid JSON) as MCP's SDKs
// and wrap read them: members spelled so, escapes decoded. encoding/json also took
// "ReadOnlyHint" or "Annotations" for them, which the TypeScript SDK drops and wrap fences,
// and a policy written from that reading said fence: false for a tool no client reads as
// read-only.
func (t *publishedTool) asSpelled(raw json.RawMessage) {
	t.Name = ""
	if name := jsonrpc.MemberValue(raw, "name"); len(name) > 0 && name[0] == '"' {
		t.Name = jsonrpc.Unquote(name)
	}
	ann := jsonrpc.MemberValue(raw, "annotations")
	t.Annotations.ReadOnlyHint = hint(ann, "readOnlyHint")
	t.Annotations.DestructiveHint = hint(ann, "destructiveHint")
	t.Annotations.IdempotentHint = hint(ann, "idempotentHint")
	t.Annotations.OpenWorldHint = hint(ann, "openWorldHint")
}

func isTrue(p *bool) bool { return p != nil && *p }

// hint reads the boolean hint name of annotations: nil unless it is true or false.
func hint(annotations json.RawMessage, name string) *bool {
	switch v := string(jsonrpc.MemberValue(annotations, name)); v {
	case "true", "false":
		b := v == "true"
		return &b
	}
	return nil
}

// Generate writes a commented starting policy for the tools of pages (every page of a raw
// tools/list result, as the server sent them, however they were listed: a stdio child or an
// HTTP upstream). Each tool's entry follows from its annotations, with the reasoning as
// comments; the written file passes Parse. It is a starting point for review, not a verdict:
// annotations are the server's hints. When the commented file would be larger than
// MaxFileSize (a server of thousands of tools), the per-tool reasoning is left out.
func Generate(w io.Writer, pages []json.RawMessage, src Source) error {
	var buf bytes.Buffer
	if err := generate(&buf, pages, src, false); err != nil {
		return err
	}
	if buf.Len() > MaxFileSize {
		buf.Reset()
		if err := generate(&buf, pages, src, true); err != nil {
			return err
		}
		if buf.Len() > MaxFileSize {
			return fmt.Errorf("the server lists so many tools that even without comments the policy would be larger than 1 MiB, which policy check refuses; use wrap's flags and defaults instead")
		}
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// maxKeyName bounds the names written as keys. One tool of a megabyte-long name made the file
// larger than MaxFileSize whatever else the server listed, and before 2026-12-07 policy init
// refused the whole server with "the server lists so many tools" for a listing of eight.
const maxKeyName = 128 << 10

func generate(w io.Writer, pages []json.RawMessage, src Source, terse bool) error {
	var tools []publishedTool
	keys := map[string]string{}
	seen := map[string]bool{}
	at := map[string]int{} // a name's index in tools
	for i, page := range pages {
		var p struct {
			Tools []publishedTool `json:"tools"`
		}
		if err := json.Unmarshal(page, &p); err != nil {
			return fmt.Errorf("tools/list page %d: %v", i+1, err)
		}
		var raw struct {
			Tools []json.RawMessage `json:"tools"`
		}
		_ = json.Unmarshal(page, &raw) // read above: cannot fail
		for j := range p.Tools {
			p.Tools[j].asSpelled(raw.Tools[j])
		}
		kp, _, err := wrap.KeyProperties(page)
		if err != nil {
			return err
		}
		for k, v := range kp {
			keys[k] = v
		}
		for _, t := range p.Tools {
			if t.Name == "" {
				continue
			}
			if seen[t.Name] {
				// Listed again: wrap passes a tool through only when every entry of it says
				// readOnlyHint, so the entry written is the first that does not, if any.
				if k := &tools[at[t.Name]]; isTrue(k.Annotations.ReadOnlyHint) && !isTrue(t.Annotations.ReadOnlyHint) {
					*k = t
				}
				continue
			}
			seen[t.Name] = true
			at[t.Name] = len(tools)
			tools = append(tools, t)
		}
	}
	byName := map[string]*scan.Tool{}
	var scanned []scan.Tool
	if src.Scan != nil {
		scanned = append(append(scanned, src.Scan.Candidates...), src.Scan.Others...)
	}
	for i := range scanned {
		if t := &scanned[i]; byName[t.Name] == nil {
			byName[t.Name] = t
		}
	}
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "# effectfence policy generated by `effectfence policy init` from the tools/list of:\n")
	fmt.Fprintf(b, "#   %s\n", comment(src.Server, 200))
	fmt.Fprintf(b, "# Each entry follows from the tool's annotations, which are the server's own hints, not\n")
	fmt.Fprintf(b, "# guarantees: review every entry before use. Format and precedence: docs/policy.md.\n")
	fmt.Fprintf(b, "# Check it with: effectfence policy check FILE\n")
	if src.Scan != nil {
		fmt.Fprintf(b, "# Lines starting \"scan:\" are what `effectfence scan %s` found in the code (paths\n", comment(src.ScanPath, 120))
		fmt.Fprintf(b, "# relative to it): evidence for review, not a verdict.\n")
	}
	fmt.Fprintf(b, "version: 1\n\n")
	fmt.Fprintf(b, "# Server-wide settings (all optional; flags given to wrap win over this file):\n")
	fmt.Fprintf(b, "# scope: my-server       # a name shares receipts across directories and environments\n")
	fmt.Fprintf(b, "# ledger: ledger.db      # default: EFFECTFENCE_LEDGER, else a file per scope\n")
	fmt.Fprintf(b, "# fence_reads: false     # true fences tools annotated readOnlyHint too\n")
	fmt.Fprintf(b, "# defaults:\n")
	fmt.Fprintf(b, "#   replay_window: 10m   # how long a recorded result answers an identical call\n")
	fmt.Fprintf(b, "#   wait: 30s            # how long a duplicate waits for the identical call in flight\n")
	fmt.Fprintf(b, "#   elicit: true         # a person may be asked about an unknown outcome\n")
	if len(tools) == 0 {
		fmt.Fprintf(b, "\n# The server listed no tools.\n")
		return b.Flush()
	}
	if terse {
		fmt.Fprintf(b, "\n# The server lists %d tools: the per-tool reasoning is left out to keep the file under\n", len(tools))
		fmt.Fprintf(b, "# 1 MiB (policy check refuses larger files). Each entry follows from the tool's annotations:\n")
		fmt.Fprintf(b, "# readOnlyHint passes through, the rest is fenced, idempotentHint adds rerun_safe.\n")
	}
	var writable []publishedTool
	var unwritable, overlong []string
	for _, t := range tools {
		if len(t.Name) > maxKeyName {
			overlong = append(overlong, t.Name)
			continue
		}
		if checkPattern(t.Name) != nil || strings.ContainsAny(t.Name, "*?") {
			unwritable = append(unwritable, t.Name)
			continue
		}
		writable = append(writable, t)
	}
	if len(writable) == 0 {
		// An empty mapping: a bare "tools:" is null, which Parse refuses.
		fmt.Fprintf(b, "\ntools: {}\n")
	} else {
		fmt.Fprintf(b, "\ntools:\n")
	}
	for _, t := range writable {
		writeTool(b, t, keys[t.Name], byName[t.Name], terse)
	}
	if len(unwritable) > 0 {
		fmt.Fprintf(b, "\n# These tools' names cannot be keys of a policy (white space or the braille blank U+2800,\n")
		fmt.Fprintf(b, "# control characters, or the glob characters * ? [ ] { } \\): they get the defaults, and wrap fences them unless they are\n")
		fmt.Fprintf(b, "# annotated readOnlyHint. Use wrap's flags (--pass, --key, ...) to set them.\n")
		for _, n := range unwritable {
			fmt.Fprintf(b, "#   %s\n", comment(strconv.Quote(n), 200))
		}
	}
	if len(overlong) > 0 {
		fmt.Fprintf(b, "\n# These tools' names are longer than %d bytes, too long to be keys in a file policy check\n", maxKeyName)
		fmt.Fprintf(b, "# reads (it refuses files over 1 MiB): they get the defaults, and wrap fences them unless they\n")
		fmt.Fprintf(b, "# are annotated readOnlyHint. Shown shortened:\n")
		for _, n := range overlong {
			fmt.Fprintf(b, "#   %s (%d bytes)\n", comment(strconv.Quote(n), 200), len(n))
		}
	}
	if src.Scan != nil {
		var unpublished []string
		for _, st := range scanned {
			if !seen[st.Name] && st.Candidate {
				unpublished = append(unpublished, fmt.Sprintf("%s (%s:%d): %s", st.Name, st.File, st.Line, st.Reason))
			}
		}
		if len(unpublished) > 0 {
			fmt.Fprintf(b, "\n# effectfence scan %s also found candidates the server did not list (not published,\n", comment(src.ScanPath, 120))
			fmt.Fprintf(b, "# or published under another name):\n")
			for _, u := range unpublished {
				fmt.Fprintf(b, "#   %s\n", comment(u, 200))
			}
		}
	}
	return b.Flush()
}

func writeTool(b *bufio.Writer, t publishedTool, keyProp string, st *scan.Tool, terse bool) {
	a := t.Annotations
	is := func(p *bool) bool { return p != nil && *p }
	if terse {
		switch {
		case is(a.ReadOnlyHint):
			fmt.Fprintf(b, "  %s: {fence: false}\n", yamlKey(t.Name))
		case is(a.IdempotentHint):
			fmt.Fprintf(b, "  %s: {fence: true, rerun_safe: true}\n", yamlKey(t.Name))
		default:
			fmt.Fprintf(b, "  %s: {fence: true}\n", yamlKey(t.Name))
		}
		return
	}
	fmt.Fprintf(b, "\n")
	if d := firstLine(t.Description); d != "" {
		fmt.Fprintf(b, "  # %s\n", comment(d, 110))
	}
	var why []string
	readOnly := is(a.ReadOnlyHint)
	switch {
	case readOnly:
		why = append(why, "readOnlyHint: the server says this tool only reads, so its calls pass through",
			"unfenced. Say fence: true if a repeated call would cost or change anything.")
	case a.ReadOnlyHint == nil && a.DestructiveHint == nil && a.IdempotentHint == nil:
		why = append(why, "No annotations: MCP's defaults say it may write and may destroy, and is not",
			"idempotent, so it is fenced: identical calls run once.")
	case a.DestructiveHint == nil || is(a.DestructiveHint):
		why = append(why, "destructiveHint (true, or absent: MCP's default): a repeat may destroy or overwrite",
			"again, so it is fenced.")
	default:
		why = append(why, "destructiveHint: false: a repeat destroys nothing, but it still acts twice, so it is fenced.")
	}
	rerun := false
	switch {
	case readOnly:
	case is(a.IdempotentHint):
		rerun = true
		why = append(why, "idempotentHint: a repeat with the same arguments has no further effect, so a claim",
			"whose holder vanished is run again (rerun_safe) instead of fenced as unknown.")
	default:
		why = append(why, "Not idempotent: a claim whose holder vanished stays fenced (unknown) for a person to check.")
	}
	if !readOnly && keyProp != "" {
		why = append(why, fmt.Sprintf("Argument %s looks like an idempotency key: wrap fills it with the call's hash", comment(strconv.Quote(keyProp), 60)),
			"when empty (wrap --no-inject-key turns that off). If the server honours it, rerun_safe: true is safe.")
	}
	if is(a.OpenWorldHint) && !readOnly {
		why = append(why, "openWorldHint: it reaches outside systems; an unknown outcome needs a check there.")
	}
	for _, l := range why {
		fmt.Fprintf(b, "  # %s\n", l)
	}
	if st != nil {
		writeEvidence(b, st, readOnly)
	}
	fmt.Fprintf(b, "  %s:\n", yamlKey(t.Name))
	if readOnly {
		fmt.Fprintf(b, "    fence: false\n")
		return
	}
	fmt.Fprintf(b, "    fence: true\n")
	if rerun {
		fmt.Fprintf(b, "    rerun_safe: true\n")
	}
}

// writeEvidence adds what the scan saw of the tool's code, as comments.
func writeEvidence(b *bufio.Writer, st *scan.Tool, readOnly bool) {
	fmt.Fprintf(b, "  # scan: %s:%d: %s\n", comment(st.File, 100), st.Line, comment(st.Reason, 100))
	if readOnly && len(st.Evidence) > 0 {
		fmt.Fprintf(b, "  # scan: it is annotated read-only, yet its code has write sites; consider fence: true.\n")
	}
	for i, s := range st.Evidence {
		if i == 3 {
			fmt.Fprintf(b, "  #   ... and %d more write sites\n", len(st.Evidence)-3)
			break
		}
		fmt.Fprintf(b, "  #   write %s at %s:%d: %s\n", comment(s.Kind, 20), comment(s.File, 80), s.Line, comment(s.Text, 90))
	}
	for i, s := range st.Guards {
		if i == 2 {
			break
		}
		fmt.Fprintf(b, "  #   guard %s at %s:%d\n", comment(s.Kind, 40), comment(s.File, 80), s.Line)
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	return s
}

// comment makes s safe inside a YAML comment: one line, no control or format characters
// (Parse refuses the latter: they hide or reorder text), at most max runes.
func comment(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || hidden(r, 0) {
			return ' '
		}
		return r
	}, s)
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return s
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// yamlKey writes a tool name as a YAML key that reads back as the same string.
func yamlKey(name string) string {
	switch strings.ToLower(name) {
	case "true", "false", "yes", "no", "on", "off", "null", "y", "n":
		return strconv.Quote(name)
	}
	if plainKey.MatchString(name) {
		return name
	}
	return quote(name)
}

// quote is strconv.Quote (its escapes are YAML's too), with every character Parse refuses
// written as itself (hidden: strconv leaves those it takes for printable, the Hangul filler
// U+3164, the combining grapheme joiner, variation selectors) written as an escape.
func quote(s string) string {
	q := strconv.Quote(s)
	if !strings.ContainsFunc(q, func(r rune) bool { return hidden(r, 0) }) {
		return q
	}
	var b strings.Builder
	for _, r := range q {
		if hidden(r, 0) {
			b.WriteString(escape(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
