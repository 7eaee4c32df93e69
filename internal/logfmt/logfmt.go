// Package logfmt turns a stream of log lines into JSON lines, one object per line, for
// operators whose log pipeline wants structure (`--log-format json`).
//
// Each line becomes {"time": RFC 3339 with nanoseconds, "level": "info"|"warn", "source":
// "effectfence"|"server", "msg": the line}. The source is the writer's, never the line's: New
// returns effectfence's own writer, and its Server writer is the one the MCP servers' stderr
// goes to, so a server's line is "server" whatever it says (one starting "effectfence wrap:"
// included). Lines of effectfence's that say a call was fenced, failed or is unknown are
// "warn"; a server's are "info". The message is JSON-escaped, so no line of the server's can
// forge another record.
package logfmt

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"time"
)

// MaxLine bounds one buffered line; a longer one is written in pieces.
const MaxLine = 64 << 10

// Writer writes each complete line written to it as one JSON object to the underlying writer.
type Writer struct {
	out    *output
	source string
	buf    []byte // guarded by out.mu
}

// output is the underlying writer, shared by the writers of every source.
type output struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
}

// New returns a JSON-lines Writer over w for effectfence's own lines.
func New(w io.Writer) *Writer {
	return &Writer{out: &output{w: w, now: time.Now}, source: "effectfence"}
}

// Server returns a Writer over the same output whose every line is labelled the server's:
// for what MCP servers write to their stderr. It has its own partial line; writers of
// whole lines (mcpstdio writes each child's stderr so) never mix.
func (lw *Writer) Server() *Writer { return &Writer{out: lw.out, source: "server"} }

type record struct {
	Time   string `json:"time"`
	Level  string `json:"level"`
	Source string `json:"source"`
	Msg    string `json:"msg"`
}

// Write buffers p and writes every complete line in it.
func (lw *Writer) Write(p []byte) (int, error) {
	lw.out.mu.Lock()
	defer lw.out.mu.Unlock()
	lw.buf = append(lw.buf, p...)
	for {
		i := bytes.IndexByte(lw.buf, '\n')
		if i < 0 {
			if len(lw.buf) < MaxLine {
				return len(p), nil
			}
			i = MaxLine
		}
		line := lw.buf[:i]
		rest := lw.buf[i:]
		if len(rest) > 0 && rest[0] == '\n' {
			rest = rest[1:]
		}
		if err := lw.emit(string(bytes.TrimRight(line, "\r"))); err != nil {
			lw.buf = append(lw.buf[:0], rest...)
			return 0, err
		}
		lw.buf = append(lw.buf[:0], rest...)
	}
}

// Flush writes a last line that did not end in a newline.
func (lw *Writer) Flush() error {
	lw.out.mu.Lock()
	defer lw.out.mu.Unlock()
	if len(lw.buf) == 0 {
		return nil
	}
	line := string(lw.buf)
	lw.buf = lw.buf[:0]
	return lw.emit(line)
}

func (lw *Writer) emit(line string) error {
	r := record{Time: lw.out.now().UTC().Format(time.RFC3339Nano), Level: "info", Source: lw.source, Msg: line}
	if lw.source == "effectfence" && warn(line) {
		r.Level = "warn"
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = lw.out.w.Write(append(b, '\n'))
	return err
}

func warn(line string) bool {
	if strings.Contains(line, " since boot: ") {
		return false // the counters line names refusal kinds, all zero or not
	}
	for _, w := range []string{"unknown", "fenced", "failed", "cannot", "error", "abandoned", "refused"} {
		if strings.Contains(line, w) {
			return true
		}
	}
	return false
}
