package scan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// Options bound a scan. The zero value means the defaults.
type Options struct {
	MaxFileBytes int64 // files larger are skipped and reported; default 1 MiB
	MaxDepth     int   // folders nested deeper are skipped and reported; default 40
	MaxFiles     int   // source files beyond this are skipped and reported; default 200,000
	Workers      int   // files read and scanned at once; default GOMAXPROCS

	// Published, when not nil, is the server's own tools/list (see ListPublished): the scan
	// then follows each published name into the code, reports published tools it could not
	// find and declarations the server does not publish, and sets the published annotations
	// beside what the code suggests. RunCommand is recorded in the report.
	Published  []PublishedTool
	RunCommand []string
}

func (o Options) withDefaults() Options {
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 1 << 20
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = 40
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = 200_000
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	return o
}

// ErrBadRoot is returned when the path to scan is missing or not a folder.
var ErrBadRoot = errors.New("scan: path must be an existing directory")

// Report is what a scan found. It holds candidates and evidence, never a verdict: a source
// scan cannot see the services a repository calls, so a candidate may be guarded elsewhere
// and a tool left out may still fire twice.
type Report struct {
	Root       string     `json:"root"`
	Candidates []Tool     `json:"candidates"`
	Others     []Tool     `json:"not_candidates"`
	Guards     []Site     `json:"guards"`
	Retries    []Site     `json:"retries"`
	Writes     []Site     `json:"writes"`
	Unresolved []Site     `json:"unresolved_declarations"`
	Files      FileCounts `json:"files"`
	Skipped    []Skipped  `json:"skipped"`
	CannotSee  []string   `json:"cannot_see"`
	// Notes say what the scan could not see in this tree: no declarations, or files that
	// mention tool registration where nothing was resolved. Never a silent zero.
	Notes []Note `json:"notes"`
	// Run is set when the server was started (--run) and its tools/list read.
	Run *RunReport `json:"run,omitempty"`

	// rawPaths maps a path shown with \xNN escapes (a name that is not UTF-8) to the path
	// itself, for SARIF's URIs.
	rawPaths map[string]string
}

// Note is one thing the scan could not see or resolve.
type Note struct {
	Kind  string   `json:"kind"` // no_declarations, unresolved_files, unresolved_sites, published_not_in_code, published_none, names_not_utf8
	Text  string   `json:"text"`
	Files []string `json:"files,omitempty"`
}

// FileCounts says how much of the tree was read.
type FileCounts struct {
	Scanned       int            `json:"scanned"`
	ByLanguage    map[string]int `json:"by_language"`
	SkippedByRule int            `json:"skipped_by_rule"` // vendored, generated, tests, fixtures, hidden, reached twice
	Ignored       int            `json:"ignored"`         // other languages and data files
	SkippedBad    map[string]int `json:"skipped_bad_input"`
}

// Tool is one declared tool and what the scan saw of it.
type Tool struct {
	Name      string   `json:"name"`
	NameFrom  string   `json:"name_from,omitempty"` // the constant it was given through
	File      string   `json:"file"`
	Line      int      `json:"line"`
	Language  string   `json:"language"`
	Style     string   `json:"style"`
	Candidate bool     `json:"candidate"`
	Money     bool     `json:"money"`
	Reason    string   `json:"reason"`
	Block     string   `json:"block"`         // file:from-to of the tool's own code
	Via       []string `json:"via,omitempty"` // helpers followed because only this tool uses them
	Evidence  []Site   `json:"evidence"`      // write sites in the tool's own code
	Guards    []Site   `json:"guards"`        // guard sites in the tool's own code

	// with --run: whether the server publishes it, its published annotations, and what the
	// code alone suggested before the annotations were weighed
	Published    *bool        `json:"published,omitempty"`
	Annotations  *Annotations `json:"published_annotations,omitempty"`
	CodeSuggests string       `json:"code_suggests,omitempty"`
}

// cannotSee is stated in every report, because what a scan did not find is not evidence of
// absence.
var cannotSee = []string{
	"effects inside services the repository calls: a remote API may deduplicate or not, and its guard is not in this tree",
	"handlers and helpers in dependencies, generated code, or reached through more than one call or through dynamic dispatch",
	"tool names computed at run time (see unresolved declarations)",
	"whether a guard found here covers a given tool's effect: its key's scope, lifetime and storage",
	"retries by the MCP client, the agent framework, a gateway or a queue in front of the server",
	"configuration, environment and feature flags that choose code paths",
	"whether a write-sounding tool only prepares a payload that something else signs or sends",
	"two identical calls at the same instant; only running them shows that (effectfence probe)",
}

type fileResult struct {
	src                     *source
	decls                   []decl
	writes, guards, retries []Site
	consts                  []constDef
	funcs                   []funcDef
	dispatch                []dispatchSite
	skip                    *Skipped
	hints                   []int // lines that mention tool registration (registerTool, @mcp, tool(, inputSchema...)
}

// CheckRoot returns ErrBadRoot (wrapped) unless root is a folder that can be listed. A
// folder that cannot be (no read permission) is a bad path like a missing one: scanned, it
// gave a report of nothing found, exit 0, with only "." among the skipped to say why.
func CheckRoot(root string) error {
	fi, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadRoot, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrBadRoot, root)
	}
	d, err := os.Open(root)
	if err == nil {
		_, err = d.Readdirnames(1)
		d.Close()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s cannot be read: %v", ErrBadRoot, root, err)
	}
	return nil
}

// Scan reads the source tree at root and reports tool declarations that could repeat an
// effect when called twice, with the evidence for each. It returns ErrBadRoot (wrapped) for
// a missing, non-directory or unreadable root; unreadable, binary, huge and looping entries inside the
// tree are skipped and listed in the report, never fatal.
func Scan(ctx context.Context, root string, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	if err := CheckRoot(root); err != nil {
		return nil, err
	}
	w, err := walk(ctx, root, opts)
	if err != nil {
		return nil, err
	}

	results := make([]fileResult, len(w.files))
	var wg sync.WaitGroup
	next := make(chan int)
	for range opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = scanFile(w.files[i], opts.MaxFileBytes)
			}
		}()
	}
	for i := range w.files {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	rep := &Report{
		Root:      filepath.ToSlash(root),
		Skipped:   w.skipped,
		CannotSee: cannotSee,
		rawPaths:  w.rawPaths,
		Files: FileCounts{ByLanguage: map[string]int{}, SkippedBad: map[string]int{},
			SkippedByRule: w.skippedByRule, Ignored: w.ignored},
	}
	var ok []fileResult
	for _, r := range results {
		if r.skip != nil {
			rep.Skipped = append(rep.Skipped, *r.skip)
			continue
		}
		ok = append(ok, r)
		rep.Files.Scanned++
		rep.Files.ByLanguage[r.src.lang]++
		rep.Writes = append(rep.Writes, r.writes...)
		rep.Guards = append(rep.Guards, r.guards...)
		rep.Retries = append(rep.Retries, r.retries...)
	}
	for _, s := range rep.Skipped {
		rep.Files.SkippedBad[s.Reason]++
	}
	for _, ss := range [][]Site{rep.Writes, rep.Guards, rep.Retries} {
		sort.SliceStable(ss, func(i, j int) bool {
			if ss[i].File != ss[j].File {
				return ss[i].File < ss[j].File
			}
			return ss[i].Line < ss[j].Line
		})
	}
	assemble(rep, ok, opts)
	addNotes(rep, ok)
	if n := len(w.notUTF8); n > 0 {
		shown := w.notUTF8
		if len(shown) > maxNoteFiles {
			shown = shown[:maxNoteFiles]
		}
		rep.Notes = append(rep.Notes, Note{Kind: "names_not_utf8", Files: shown,
			Text: fmt.Sprintf("%d file or folder name(s) are not UTF-8: the report writes each byte of theirs that is not as \\xNN (JSON holds only Unicode)", n)})
	}
	for _, sl := range []*[]Site{&rep.Guards, &rep.Retries, &rep.Writes, &rep.Unresolved} {
		if *sl == nil {
			*sl = []Site{}
		}
	}
	for _, tl := range []*[]Tool{&rep.Candidates, &rep.Others} {
		if *tl == nil {
			*tl = []Tool{}
		}
	}
	if rep.Skipped == nil {
		rep.Skipped = []Skipped{}
	}
	return rep, nil
}

func scanFile(f walkedFile, limit int64) (r fileResult) {
	text, err := readSource(f, limit)
	switch {
	case errors.Is(err, errBinary):
		return fileResult{skip: &Skipped{Path: f.rel, Reason: SkipBinary}}
	case errors.Is(err, errTooLarge):
		return fileResult{skip: &Skipped{Path: f.rel, Reason: SkipTooLarge, Detail: err.Error()}}
	case err != nil:
		return fileResult{skip: &Skipped{Path: f.rel, Reason: SkipUnreadable, Detail: err.Error()}}
	}
	if generatedMarker(text) {
		return fileResult{skip: &Skipped{Path: f.rel, Reason: "generated"}}
	}
	s := newSource(f.rel, f.lang, text)
	r.src = s
	r.decls = findDecls(s)
	r.writes, r.guards, r.retries = fileSites(s)
	r.consts = fileConsts(s)
	r.funcs = fileFuncs(s)
	r.dispatch = fileDispatch(s)
	r.hints = registrationSites(s)
	return r
}

// span is a range of lines in one file that belongs to a tool.
type span struct {
	file     *source
	from, to int
}

func (sp span) contains(file string, line int) bool {
	return sp.file.rel == file && line >= sp.from && line <= sp.to
}

type toolDraft struct {
	soleInFile bool
	d          decl
	src        *source
	tool       Tool
	spans      []span
	calls      map[string]bool
	pub        *PublishedTool
}

var (
	callNameRe = regexp.MustCompile(`\b([A-Za-z_]\w*)\s*\(`)
	rubyCallRe = regexp.MustCompile(`(?:\.|^|\s)([a-z_]\w*[?!]?)`)
	readOnlyRe = regexp.MustCompile(`readOnlyHint\s*[:=]\s*[Tt]rue|ReadOnlyHint\s*:\s*true|WithReadOnlyHintAnnotation\(\s*true|read_only_hint\s*=\s*True|readOnlyHint\s*\(\s*true`)
	effectHint = regexp.MustCompile(`destructiveHint\s*[:=]\s*[Tt]rue|DestructiveHint\s*:\s*(?:&\w+|\w+\.Ptr\(true\)|true)|WithDestructiveHintAnnotation\(\s*true|readOnlyHint\s*[:=]\s*[Ff]alse|ReadOnlyHint\s*:\s*false|WithReadOnlyHintAnnotation\(\s*false`)
)

// assemble resolves names across the repository, attaches each tool's own code, and
// classifies it.
func assemble(rep *Report, files []fileResult, opts Options) {
	consts := map[string]string{}
	ambiguous := map[string]bool{}
	put := func(k, v string) {
		if k == "" {
			return
		}
		if old, ok := consts[k]; ok && old != v {
			ambiguous[k] = true
		}
		consts[k] = v
	}
	funcs := map[string][]funcDef{}
	byNorm := map[string][]funcDef{}
	dispatch := map[string][]dispatchSite{}
	for _, f := range files {
		for _, c := range f.consts {
			if c.global {
				put(c.key, c.value)
				put(c.qualified, c.value)
			}
		}
		for _, fn := range f.funcs {
			funcs[fn.name] = append(funcs[fn.name], fn)
			byNorm[normName(fn.name)] = append(byNorm[normName(fn.name)], fn)
		}
		for _, ds := range f.dispatch {
			dispatch[ds.key] = append(dispatch[ds.key], ds)
		}
	}
	resolve := func(ref string, f fileResult) (string, bool) {
		ref = strings.ReplaceAll(ref, "::", ".")
		if v, ok := fileConst(f.consts, ref); ok {
			return v, true
		}
		if v, ok := consts[ref]; ok && !ambiguous[ref] {
			return v, true
		}
		if i := strings.LastIndexByte(ref, '.'); i >= 0 {
			parts := strings.Split(ref, ".")
			if len(parts) >= 2 {
				q := parts[len(parts)-2] + "." + parts[len(parts)-1]
				if v, ok := consts[q]; ok && !ambiguous[q] {
					return v, true
				}
			}
			last := ref[i+1:]
			if v, ok := consts[last]; ok && !ambiguous[last] {
				return v, true
			}
		}
		return "", false
	}

	var drafts []*toolDraft
	seen := map[string]bool{}
	for _, f := range files {
		sole := soleDecl(f.decls)
		for _, d := range f.decls {
			t := Tool{Name: d.name, File: f.src.rel, Line: d.line, Language: f.src.lang, Style: d.style}
			if d.name == "" {
				if v, ok := resolve(d.ref, f); ok {
					t.Name, t.NameFrom = v, d.ref
				} else if _, isFn := funcs[d.ref]; isFn && !constantLike(d.ref) {
					t.Name = d.ref // add_tool(fn): the function's name is the tool's
					d.handlers = append(d.handlers, d.ref)
				} else if constantLike(d.ref) {
					t.Name, t.NameFrom = d.ref, d.ref+" (unresolved)"
				} else {
					rep.Unresolved = append(rep.Unresolved, Site{File: f.src.rel, Line: d.line, Kind: d.style, Text: clip(f.src.line(d.line))})
					continue
				}
			}
			key := t.Name + "\x00" + t.File
			if seen[key] {
				continue
			}
			seen[key] = true
			dr := &toolDraft{d: d, src: f.src, tool: t, calls: map[string]bool{}, soleInFile: sole}
			dr.spans = []span{{f.src, d.from, d.to}}
			// a dispatch branch for this tool: same file first, then anywhere
			keys := []string{t.Name}
			if d.ref != "" {
				r := strings.ReplaceAll(d.ref, "::", ".")
				keys = append(keys, r[strings.LastIndexByte(r, '.')+1:])
			}
			var branch *dispatchSite
			for _, k := range keys {
				for i, ds := range dispatch[k] {
					if ds.from >= d.from && ds.from <= d.to && ds.file == f.src {
						continue // the declaration itself
					}
					if branch == nil || ds.file == f.src && branch.file != f.src {
						branch = &dispatch[k][i]
					}
				}
			}
			if branch != nil {
				dr.spans = append(dr.spans, span{branch.file, branch.from, branch.to})
			}
			drafts = append(drafts, dr)
		}
	}

	var pubOnly []Tool
	if opts.Published != nil {
		drafts, pubOnly = followPublished(rep, files, drafts, opts)
	}

	// callees of each tool's own code that the repository defines, read once per line
	// (tools may share lines: many on one long line, a shared dispatch block)
	lineCalls := map[*source]map[int][]string{}
	callsOn := func(src *source, n int) []string {
		if c, ok := lineCalls[src][n]; ok {
			return c
		}
		re := callNameRe
		if src.lang == langRuby {
			re = rubyCallRe // Ruby calls need no parentheses
		}
		var c []string
		for _, m := range re.FindAllStringSubmatch(src.line(n), -1) {
			if _, ok := funcs[m[1]]; ok {
				c = append(c, m[1])
			}
		}
		if lineCalls[src] == nil {
			lineCalls[src] = map[int][]string{}
		}
		lineCalls[src][n] = c
		return c
	}
	users := map[string]int{}
	for _, dr := range drafts {
		for _, sp := range dr.spans {
			for n := sp.from; n <= sp.to; n++ {
				for _, c := range callsOn(sp.file, n) {
					dr.calls[c] = true
				}
			}
		}
		// a function carrying the tool's own name (handleCreateTask, todowrite for TodoWrite,
		// create_task_handler) is its handler wherever it is defined
		for _, k := range handlerKeys(dr.tool.Name) {
			if fds := byNorm[k]; len(fds) > 0 && len(fds) <= 2 {
				dr.calls[fds[0].name] = true
			}
		}
		for _, h := range dr.d.handlers {
			h = h[strings.LastIndexAny(h, ".:")+1:]
			if _, ok := funcs[h]; ok {
				dr.calls[h] = true
			}
		}
		for c := range dr.calls {
			users[c]++
		}
	}

	for _, dr := range drafts {
		// follow helpers that only this tool uses, or that carry the tool's own name; a
		// helper shared by several tools stays repository corroboration
		var via []string
		own := map[string]bool{}
		for _, k := range handlerKeys(dr.tool.Name) {
			own[k] = true
		}
		for c := range dr.calls {
			same := own[normName(c)]
			if users[c] != 1 && !same {
				continue
			}
			for _, fd := range funcs[c] {
				if fd.to-fd.from > 400 || (fd.file == dr.src && fd.from >= dr.d.from && fd.to <= dr.d.to) {
					continue
				}
				dr.spans = append(dr.spans, span{fd.file, fd.from, fd.to})
				via = append(via, c)
				break
			}
		}
		sort.Strings(via)
		dr.tool.Via = via
		classifyWithPublished(dr, rep)
		if dr.tool.Candidate {
			rep.Candidates = append(rep.Candidates, dr.tool)
		} else {
			rep.Others = append(rep.Others, dr.tool)
		}
	}
	for _, t := range pubOnly {
		if t.Candidate {
			rep.Candidates = append(rep.Candidates, t)
		} else {
			rep.Others = append(rep.Others, t)
		}
	}
	sortTools(rep.Candidates)
	sortTools(rep.Others)
}

// annotated reports whether a declaration's own text (lines from-to, or the whole file for
// the only tool in it, whose annotations may sit in a config constant above) says
// readOnlyHint: true, and whether it says readOnlyHint: false or destructiveHint: true. The
// answer is kept per extent: tools sharing one (many on one long line) share the matching.
func (s *source) annotated(from, to int, whole bool) (readOnly, effect bool) {
	key := [2]int{from, to}
	if whole {
		key = [2]int{0, 0}
	}
	if a, ok := s.annotations[key]; ok {
		return a[0], a[1]
	}
	own := s.text
	if !whole {
		own = s.text[s.starts[from-1]:endOffset(s, to)]
	}
	a := [2]bool{readOnlyRe.Match(own), effectHint.Match(own)}
	if s.annotations == nil {
		s.annotations = map[[2]int][2]bool{}
	}
	s.annotations[key] = a
	return a[0], a[1]
}

// fileConst resolves a plain identifier against the file's own top-level constants, when the
// file defines it exactly once.
func fileConst(cs []constDef, ref string) (string, bool) {
	val, n := "", 0
	for _, c := range cs {
		if c.key == ref && c.qualified == "" {
			val = c.value
			n++
		}
	}
	return val, n == 1
}

func sortTools(ts []Tool) {
	sort.SliceStable(ts, func(i, j int) bool {
		if ts[i].File != ts[j].File {
			return ts[i].File < ts[j].File
		}
		return ts[i].Line < ts[j].Line
	})
}

// classify decides whether a tool is a candidate, from the words of its name and the write
// sites in its own code, and says why in words.
func classify(dr *toolDraft, rep *Report) {
	t := &dr.tool
	t.Candidate, t.Money = false, false
	c := classifyName(t.Name)
	t.Block = fmt.Sprintf("%s:%d-%d", dr.src.rel, dr.d.from, dr.d.to)
	t.Evidence = []Site{}
	t.Guards = []Site{}
	for _, w := range rep.Writes {
		for _, sp := range dr.spans {
			if sp.contains(w.File, w.Line) {
				t.Evidence = append(t.Evidence, w)
				break
			}
		}
	}
	for _, g := range rep.Guards {
		for _, sp := range dr.spans {
			if sp.contains(g.File, g.Line) {
				t.Guards = append(t.Guards, g)
				break
			}
		}
	}
	declaredReadOnly, hintedEffect := dr.src.annotated(dr.d.from, dr.d.to, dr.soleInFile)
	if dr.pub != nil && dr.pub.Annotations != nil {
		// the server's published annotations replace what the source text seemed to say
		declaredReadOnly = dr.pub.Annotations.saysReadOnly()
		hintedEffect = dr.pub.Annotations.saysEffect()
	}

	moneyInWrites := false
	for _, e := range t.Evidence {
		for _, w := range splitWords(e.Text) {
			if moneyWords[w] {
				moneyInWrites = true
			}
		}
	}
	nameMoney := len(c.money) > 0
	switch {
	case c.vetoed:
		if (nameMoney || moneyInWrites) && len(t.Evidence) > 0 {
			t.Candidate, t.Money = true, true
			t.Reason = fmt.Sprintf("read verb %q in the name, but its own code writes and mentions money", c.read[0])
		} else {
			t.Reason = fmt.Sprintf("read verb %q leads the name; no money-moving write in its own code", c.read[0])
		}
	case len(c.effect) > 0 && declaredReadOnly && len(t.Evidence) == 0:
		// the author's own annotation, with nothing in the code to contradict it
		t.Reason = "effect words in the name (" + strings.Join(c.effect, ", ") + "), but annotated read-only and no write site in its own code"
	case len(c.effect) > 0:
		t.Candidate = true
		t.Money = nameMoney || moneyInWrites
		t.Reason = "effect words in the name: " + strings.Join(c.effect, ", ")
		if declaredReadOnly {
			t.Reason += " (though it is annotated read-only)"
		}
	case len(t.Evidence) > 0:
		t.Candidate = true
		t.Money = nameMoney || moneyInWrites
		t.Reason = fmt.Sprintf("no effect or read words in the name; %d write site(s) in its own code", len(t.Evidence))
	case hintedEffect && !declaredReadOnly:
		t.Candidate = true
		t.Money = nameMoney
		t.Reason = "no effect or read words in the name; annotated as not read-only or destructive"
	case !declaredReadOnly && descriptionVerb(dr) != "":
		// a name without a verb (draft_forward, Bash): the description every tool publishes
		// says what it does
		t.Candidate = true
		t.Money = nameMoney
		t.Reason = fmt.Sprintf("no effect or read words in the name; its description begins with %q", descriptionVerb(dr))
	default:
		t.Reason = "no effect or read words in the name and no write site in its own code"
		if declaredReadOnly {
			t.Reason = "annotated read-only; no write site in its own code"
		}
	}
	if t.Candidate && len(t.Guards) > 0 {
		t.Reason += fmt.Sprintf("; %d guard site(s) in its own code to check", len(t.Guards))
	}
}

// normName folds an identifier or tool name to lower-case letters and digits, so that
// create_task, createTask, CreateTask, create-task and createtask compare equal.
func normName(n string) string {
	b := make([]byte, 0, len(n))
	for i := 0; i < len(n); i++ {
		c := n[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b = append(b, c)
		case c >= 'A' && c <= 'Z':
			b = append(b, c+'a'-'A')
		}
	}
	return string(b)
}

// handlerKeys are the folded names a tool's own handler may carry.
func handlerKeys(tool string) []string {
	n := normName(tool)
	if len(n) < 3 {
		return nil
	}
	return []string{n, "handle" + n, n + "handler", n + "tool", "tool" + n, "do" + n, "run" + n, n + "impl"}
}

// soleDecl reports whether a file declares one tool: one declaration by a style's pattern
// (the generic finder may see the same tool again through its name constant), or else one
// found by shape.
func soleDecl(ds []decl) bool {
	precise, shape := 0, 0
	for _, d := range ds {
		if d.generic {
			shape++
		} else {
			precise++
		}
	}
	return precise == 1 || precise == 0 && shape == 1
}
