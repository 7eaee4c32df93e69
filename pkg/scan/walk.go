package scan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"unicode/utf8"
)

// Reasons a file or folder was skipped because of what it is (bad input), reported one by
// one. Folders skipped by rule (vendored, generated, tests, hidden) are only counted.
const (
	SkipUnreadable  = "unreadable"
	SkipBinary      = "binary"
	SkipTooLarge    = "too_large"
	SkipSymlinkLoop = "symlink_loop"
	SkipTooDeep     = "too_deep"
	SkipTooMany     = "too_many_files"
	// SkipOutside is a symlink whose target lies outside the scanned folder: following it
	// could read a whole file system (a link to /) and put lines of files nobody asked to
	// review into a report that may be uploaded.
	SkipOutside = "outside_root"
)

// Skipped is one file or folder left out of the scan, with why.
type Skipped struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
}

var langByExt = map[string]string{
	".ts": langJS, ".tsx": langJS, ".mts": langJS, ".cts": langJS,
	".js": langJS, ".jsx": langJS, ".mjs": langJS, ".cjs": langJS,
	".py": langPython, ".go": langGo, ".rs": langRust, ".java": langJava, ".rb": langRuby,
}

// skipDirs are folder names that hold someone else's code, build output, tests or fixtures.
var skipDirs = wordSetExact("node_modules", "vendor", "third_party", "third-party", "external",
	"dist", "build", "out", "target", "bin", "obj", "coverage", "__pycache__", "site-packages",
	"venv", "env", "generated", "gen", "testdata", "fixtures", "__fixtures__", "test", "tests",
	"__tests__", "spec", "specs", "e2e", "mocks", "__mocks__", "bower_components", "Pods",
	"bazel-out", "elm-stuff", "jspm_packages", "deps", "_build", "tmp")

func wordSetExact(ws ...string) map[string]bool {
	m := map[string]bool{}
	for _, w := range ws {
		m[w] = true
	}
	return m
}

// skipFile reports whether a file name marks a test, a declaration file, a bundle or
// generated code.
func skipFile(name string) bool {
	low := strings.ToLower(name)
	for _, suf := range []string{"_test.go", ".test.ts", ".test.js", ".spec.ts", ".spec.js",
		".test.tsx", ".spec.tsx", ".test.mjs", ".spec.mjs", "_test.py", "_spec.rb", "_test.rb",
		"test.java", "tests.java", ".d.ts", ".min.js", ".bundle.js", ".pb.go", "_pb2.py",
		"_pb2_grpc.py", ".gen.go", "_gen.go", ".generated.ts"} {
		if strings.HasSuffix(low, suf) {
			return true
		}
	}
	return strings.HasPrefix(low, "test_") && strings.HasSuffix(low, ".py") || low == "conftest.py"
}

// generatedMarker reports whether the head of a file says it was generated.
func generatedMarker(head []byte) bool {
	if len(head) > 1024 {
		head = head[:1024]
	}
	return bytes.Contains(head, []byte("Code generated")) && bytes.Contains(head, []byte("DO NOT EDIT")) ||
		bytes.Contains(head, []byte("@generated")) || bytes.Contains(head, []byte("auto-generated"))
}

// walked is what the walk found: files to scan and what it left out.
type walked struct {
	files         []walkedFile
	byReal        map[string]int // index in files by the file's real path: one read per file
	skipped       []Skipped
	skippedByRule int
	ignored       int               // files in languages the scanner does not read
	notUTF8       []string          // paths shown with \xNN for a name's bytes that are not UTF-8
	rawPaths      map[string]string // such a path as shown -> as it is, for SARIF's URIs
}

type walkedFile struct {
	abs, rel, lang string
	size           int64
	link           bool // reached through a symlink
}

type walker struct {
	root     string
	rootReal string // the root's real path: symlinks are followed only within it
	opts     Options
	out      walked
	visited  map[string]bool // real paths of folders entered, for symlink loops
}

func walk(ctx context.Context, root string, opts Options) (walked, error) {
	// Absolute first: EvalSymlinks keeps a relative path relative, while an absolute link's
	// target comes back absolute, and within compares them as strings.
	root, err := filepath.Abs(root)
	if err != nil {
		return walked{}, err
	}
	w := &walker{root: root, opts: opts, visited: map[string]bool{}}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		return walked{}, err
	}
	w.visited[real] = true
	w.rootReal = real
	if err := w.dir(ctx, root, "", real, 0); err != nil {
		return walked{}, err
	}
	sort.Slice(w.out.files, func(i, j int) bool { return w.out.files[i].rel < w.out.files[j].rel })
	return w.out, nil
}

func (w *walker) skip(rel, reason, detail string) {
	w.out.skipped = append(w.out.skipped, Skipped{Path: rel, Reason: reason, Detail: detail})
}

func (w *walker) dir(ctx context.Context, abs, rel, real string, depth int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if depth > w.opts.MaxDepth {
		w.skip(rel, SkipTooDeep, "")
		return nil
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		w.skip(relOrDot(rel), SkipUnreadable, err.Error())
		return nil
	}
	for _, e := range entries {
		name := e.Name()
		childAbs := filepath.Join(abs, name)
		shown, escaped := utf8Name(name)
		childRel := shown
		if rel != "" {
			childRel = rel + "/" + shown
		}
		if escaped {
			w.out.notUTF8 = append(w.out.notUTF8, childRel)
		}
		if parent := w.out.rawPaths[rel]; escaped || parent != "" {
			// This name, or a folder above it, is shown escaped: SARIF names the file by a
			// URI, which carries the bytes themselves (%80), not their escape.
			raw := name
			switch {
			case parent != "":
				raw = parent + "/" + name
			case rel != "":
				raw = rel + "/" + name
			}
			if w.out.rawPaths == nil {
				w.out.rawPaths = map[string]string{}
			}
			w.out.rawPaths[childRel] = raw
		}
		typ := e.Type()
		if typ&os.ModeSymlink != 0 {
			target, err := os.Stat(childAbs)
			switch {
			case errors.Is(err, syscall.ELOOP):
				w.skip(childRel, SkipSymlinkLoop, "a chain of symlinks that leads back to itself")
				continue
			case errors.Is(err, fs.ErrNotExist):
				w.skip(childRel, SkipUnreadable, "broken symlink")
				continue
			case err != nil:
				w.skip(childRel, SkipUnreadable, err.Error())
				continue
			}
			if target.IsDir() && w.skipDirName(name) {
				w.out.skippedByRule++
				continue
			}
			childReal, err := filepath.EvalSymlinks(childAbs)
			if err != nil {
				w.skip(childRel, SkipSymlinkLoop, err.Error())
				continue
			}
			if !within(childReal, w.rootReal) {
				w.skip(childRel, SkipOutside, "a symlink that leads out of the scanned folder; not followed")
				continue
			}
			if target.IsDir() {
				if within(real, childReal) {
					w.skip(childRel, SkipSymlinkLoop, "points back to an enclosing folder")
					continue
				}
				if w.visited[childReal] {
					w.out.skippedByRule++ // the same folder, reached already by another path
					continue
				}
				w.visited[childReal] = true
				if err := w.dir(ctx, childAbs, childRel, childReal, depth+1); err != nil {
					return err
				}
				continue
			}
			w.file(childAbs, childRel, name, childReal, true, target)
			continue
		}
		if e.IsDir() {
			if w.skipDirName(name) {
				w.out.skippedByRule++
				continue
			}
			childReal := filepath.Join(real, name)
			if w.visited[childReal] {
				w.out.skippedByRule++ // reached already through a symlink
				continue
			}
			w.visited[childReal] = true
			if err := w.dir(ctx, childAbs, childRel, childReal, depth+1); err != nil {
				return err
			}
			continue
		}
		info, err := e.Info()
		if err != nil {
			w.skip(childRel, SkipUnreadable, err.Error())
			continue
		}
		w.file(childAbs, childRel, name, filepath.Join(real, name), false, info)
	}
	return nil
}

// utf8Name returns a file name as the report shows it: as it is when it is UTF-8, else with
// each byte that is not written \xNN, and true. JSON holds only Unicode: encoding/json wrote
// such a byte as U+FFFD, so two names differing in one byte came out alike, and neither named
// a file a script could open. The text report escapes them the same way (safetext).
func utf8Name(name string) (string, bool) {
	if utf8.ValidString(name) {
		return name, false
	}
	var b strings.Builder
	for i := 0; i < len(name); {
		r, size := utf8.DecodeRuneInString(name[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&b, `\x%02x`, name[i])
		} else {
			b.WriteString(name[i : i+size])
		}
		i += size
	}
	return b.String(), true
}

func (w *walker) skipDirName(name string) bool {
	return strings.HasPrefix(name, ".") || skipDirs[name] || strings.HasSuffix(name, ".egg-info")
}

// file takes a source file to read, real being its real path. info describes what a symlink
// points to, so a link to a named pipe or a device is seen for what it is: opening a pipe
// blocks until something writes to it, and a device may never end. A file reached by several
// paths (symlinks to it within the folder) is read once, under its own name when the walk
// meets it, else under the first link met; the other paths are counted as left out by rule,
// as a folder reached twice is. Read once per path, its tools were reported once per path.
func (w *walker) file(abs, rel, name, real string, link bool, info os.FileInfo) {
	lang, ok := langByExt[strings.ToLower(filepath.Ext(name))]
	if !ok {
		w.out.ignored++
		return
	}
	if strings.HasPrefix(name, ".") || skipFile(name) {
		w.out.skippedByRule++
		return
	}
	if !info.Mode().IsRegular() {
		w.skip(rel, SkipUnreadable, "not a regular file ("+specialKind(info.Mode())+"); not opened")
		return
	}
	size := info.Size()
	if size > w.opts.MaxFileBytes {
		w.skip(rel, SkipTooLarge, itoa(int(size))+" bytes")
		return
	}
	f := walkedFile{abs: abs, rel: rel, lang: lang, size: size, link: link}
	if i, seen := w.out.byReal[real]; seen {
		w.out.skippedByRule++
		if w.out.files[i].link && !link {
			w.out.files[i] = f // its own name rather than a link's
		}
		return
	}
	if len(w.out.files) >= w.opts.MaxFiles {
		w.skip(rel, SkipTooMany, "")
		return
	}
	if w.out.byReal == nil {
		w.out.byReal = map[string]int{}
	}
	w.out.byReal[real] = len(w.out.files)
	w.out.files = append(w.out.files, f)
}

func specialKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// within reports whether path is dir or lies under it (both clean absolute real paths).
func within(path, dir string) bool {
	if path == dir {
		return true
	}
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		dir += string(filepath.Separator)
	}
	return strings.HasPrefix(path, dir)
}

func relOrDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// errBinary marks a file whose content is not text.
var errBinary = errors.New("binary content")

// readSource reads one file, refusing binary content and anything that grew past the limit
// since the walk.
func readSource(f walkedFile, limit int64) ([]byte, error) {
	fh, err := os.Open(f.abs)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	// One byte past the limit tells a file that grew since the walk; at math.MaxInt64 that
	// byte would overflow the bound to a negative one, which reads nothing.
	bound := limit + 1
	if bound <= 0 {
		bound = math.MaxInt64
	}
	b, err := io.ReadAll(io.LimitReader(fh, bound))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errTooLarge
	}
	head := b
	if len(head) > 8192 {
		head = head[:8192]
	}
	if bytes.IndexByte(head, 0) >= 0 {
		return nil, errBinary
	}
	return b, nil
}

var errTooLarge = errors.New("file grew past the size limit")
