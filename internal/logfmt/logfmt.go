// Package logfmt turns a stream of log lines into JSON lines, one object per line, for
// operators whose log pipeline wants structure (`--log-format json`).
//
// Each line becomes {"time": RFC 3339 with nanoseconds, "level": "info"|"warn", "source":
// "effectfence"|"server", "msg": the line}. Lines effectfence writes start with "effectfence"
// (or, from the packages that reach the server, "mcpstdio: " and "httpback: "); anything else
// is what the MCP server wrote to its stderr ("server"). Lines that say a call
// was fenced, failed or is unknown are "warn". The message is JSON-escaped, so no line of the
// server's can forge another record.
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
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	now func() time.Time
}

// New returns a JSON-lines Writer over w.
func New(w io.Writer) *Writer { return &Writer{w: w, now: time.Now} }

type record struct {
	Time   string `json:"time"`
	Level  string `json:"level"`
	Source string `json:"source"`
	Msg    string `json:"msg"`
}

// Write buffers p and writes every complete line in it.
func (lw *Writer) Write(p []byte) (int, error) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
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
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if len(lw.buf) == 0 {
		return nil
	}
	line := string(lw.buf)
	lw.buf = lw.buf[:0]
	return lw.emit(line)
}

func (lw *Writer) emit(line string) error {
	r := record{Time: lw.now().UTC().Format(time.RFC3339Nano), Level: "info", Source: "server", Msg: line}
	if ours(line) {
		r.Source = "effectfence"
		if warn(line) {
			r.Level = "warn"
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = lw.w.Write(append(b, '\n'))
	return err
}

// ours says a line is effectfence's own: its commands' lines, and the diagnostics of the
// packages that reach the server (mcpstdio, httpback), which share the server's stderr stream.
func ours(line string) bool {
	for _, p := range []string{"effectfence", "mcpstdio: ", "httpback: "} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
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
