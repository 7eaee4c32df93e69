package httpback

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrTooLarge marks a message from the server longer than the limit (MaxMessage).
var ErrTooLarge = errors.New("httpback: message from the MCP server is too large")

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	id    string // the event's id field, "" when it had none
	hasID bool
	data  []byte
}

// sseReader reads text/event-stream events with every line and every event bounded by max.
type sseReader struct {
	r       *bufio.Reader
	max     int
	started bool // a line was read: a byte order mark is no longer the stream's
	afterCR bool // the last line ended with CR: an LF right after it belongs to it
	// retry is the stream's reconnection time, from its last retry field (retrySet: one came).
	retry    time.Duration
	retrySet bool
}

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// line returns the next line without its terminator: LF, CRLF or CR, as the format allows.
func (s *sseReader) line() ([]byte, error) {
	if s.afterCR {
		s.afterCR = false
		if b, err := s.r.Peek(1); err == nil && b[0] == '\n' {
			_, _ = s.r.Discard(1)
		}
	}
	var buf []byte
	for {
		if s.r.Buffered() == 0 {
			if _, err := s.r.Peek(1); err != nil {
				if err == io.EOF && len(buf) > 0 {
					return nil, io.ErrUnexpectedEOF // a line cut off: the event is incomplete
				}
				return nil, err
			}
		}
		chunk, _ := s.r.Peek(s.r.Buffered())
		end := bytes.IndexByte(chunk, '\n')
		if end < 0 {
			end = len(chunk)
		}
		if cr := bytes.IndexByte(chunk[:end], '\r'); cr >= 0 {
			end = cr
		}
		if len(buf)+end > s.max {
			return nil, fmt.Errorf("%w: an event-stream line is longer than %d bytes", ErrTooLarge, s.max)
		}
		buf = append(buf, chunk[:end]...)
		if end == len(chunk) {
			_, _ = s.r.Discard(end)
			continue
		}
		s.afterCR = chunk[end] == '\r'
		_, _ = s.r.Discard(end + 1)
		if !s.started {
			// The format ignores one byte order mark at the start of the stream.
			s.started = true
			buf = bytes.TrimPrefix(buf, []byte("\ufeff"))
		}
		return buf, nil
	}
}

// next returns the next event that carries data or an id. io.EOF means the stream ended
// between events; any other error means it was cut or refused.
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data []byte
	hasData := false
	for {
		ln, err := s.line()
		if err != nil {
			return sseEvent{}, err
		}
		if len(ln) == 0 { // dispatch
			if hasData || ev.hasID {
				ev.data = data
				return ev, nil
			}
			continue
		}
		if ln[0] == ':' {
			continue // comment (keep-alive)
		}
		field, value, _ := bytes.Cut(ln, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(field) {
		case "data":
			if hasData {
				data = append(data, '\n')
			}
			if len(data)+len(value) > s.max {
				return sseEvent{}, fmt.Errorf("%w: an event is longer than %d bytes", ErrTooLarge, s.max)
			}
			data = append(data, value...)
			hasData = true
		case "id":
			if !bytes.ContainsRune(value, 0) {
				ev.id, ev.hasID = string(value), true
			}
		case "retry":
			// The stream's reconnection time, in milliseconds: ASCII digits only, or the
			// field is ignored (the event-stream format). It holds for the stream, whether
			// or not the event it came in is dispatched.
			if ms, ok := retryField(value); ok {
				s.retry, s.retrySet = ms, true
			}
		}
	}
}

// retryField reads a retry field's value: milliseconds, as ASCII digits only. A value too
// large for a Duration is the longest one (a wait is bounded where it is used).
func retryField(v []byte) (time.Duration, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var ms int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		if ms > (1<<63-1)/int64(10*time.Millisecond) {
			return 1<<63 - 1, true
		}
		ms = ms*10 + int64(c-'0')
	}
	if ms > (1<<63-1)/int64(time.Millisecond) {
		return 1<<63 - 1, true
	}
	return time.Duration(ms) * time.Millisecond, true
}
