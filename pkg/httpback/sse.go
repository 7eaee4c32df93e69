package httpback

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
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
	r   *bufio.Reader
	max int
}

func newSSEReader(r io.Reader, max int) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10), max: max}
}

// line returns the next line without its terminator (LF or CRLF).
func (s *sseReader) line() ([]byte, error) {
	var buf []byte
	for {
		frag, err := s.r.ReadSlice('\n')
		if len(buf)+len(frag) > s.max+2 {
			return nil, fmt.Errorf("%w: an event-stream line is longer than %d bytes", ErrTooLarge, s.max)
		}
		buf = append(buf, frag...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				return nil, io.ErrUnexpectedEOF // a line cut off: the event is incomplete
			}
			return nil, err
		}
		buf = buf[:len(buf)-1]
		return bytes.TrimSuffix(buf, []byte{'\r'}), nil
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
		}
	}
}
