package jsonrpc

import (
	"bytes"
	"encoding/json"
	"strings"
)

// idScan finds, in a line read piece by piece and never held whole (one longer than a
// Reader's limit), the id it answers: what AnswerID finds in a line held whole, the id member
// (a string or a number) of a top-level object with no method member. It does not check that
// the rest of the line is valid JSON: a line that names a call's id answers it, if badly. It keeps a few bytes at a time whatever the
// line's size. It gives up (no id) on what it cannot read for sure: a top-level member name
// with an escape in it (it might spell "id"), an id longer than maxScannedID, two ids.
type idScan struct {
	depth   int
	inStr   bool
	esc     bool
	wantKey bool // the next string at depth 1 is a member name
	inKey   bool
	key     []byte
	keyEsc  bool
	// value: 0 no id value pending; 1 the member name was "id", its value not begun yet;
	// 2 a string value being read; 3 a number or literal being read.
	value  int
	val    []byte
	ids    int
	id     []byte
	method bool
	bad    bool
	begun  bool
}

const maxScannedID = 1024

func (s *idScan) feed(b []byte) {
	for i := 0; i < len(b) && !s.bad; i++ {
		if s.inStr && !s.esc && !s.inKey && s.value != 2 {
			// Inside a string kept by nobody (a large result's text, mostly): only a quote
			// or a backslash matters.
			j := bytes.IndexAny(b[i:], "\"\\")
			if j < 0 {
				return
			}
			i += j
		}
		s.step(b[i])
	}
}

func (s *idScan) step(c byte) {
	if !s.begun {
		switch c {
		case ' ', '\t', '\r', '\n':
			return
		case '{':
			s.begun, s.depth, s.wantKey = true, 1, true
			return
		}
		s.bad = true
		return
	}
	if s.inStr {
		switch {
		case s.inKey:
			if !s.esc && c == '"' {
				s.inStr, s.inKey = false, false
				s.endKey()
				return
			}
			if c == '\\' || s.esc {
				s.keyEsc = true
			}
			if len(s.key) < 8 {
				s.key = append(s.key, c)
			} else {
				s.key = append(s.key[:8], '~') // longer than "method": no name we look for
			}
		case s.value == 2:
			s.keep(c)
		}
		switch {
		case s.esc:
			s.esc = false
		case c == '\\':
			s.esc = true
		case c == '"':
			s.inStr = false
			if s.value == 2 {
				s.endValue()
			}
		}
		return
	}
	if s.value == 3 {
		switch c {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			s.endValue()
		default:
			s.keep(c)
			return
		}
	}
	switch c {
	case '"':
		s.inStr = true
		switch {
		case s.depth == 1 && s.wantKey:
			s.wantKey, s.inKey, s.key, s.keyEsc = false, true, s.key[:0], false
		case s.depth == 1 && s.value == 1:
			s.value = 2
			s.keep(c)
		}
	case '{', '[':
		if s.depth == 1 && s.value == 1 {
			s.value = 0 // an object or array: no id a call was sent with
		}
		s.depth++
	case '}', ']':
		s.depth--
	case ',':
		if s.depth == 1 {
			s.wantKey = true
		}
	case ':', ' ', '\t', '\r', '\n':
	default:
		if s.depth == 1 && s.value == 1 {
			s.value = 3
			s.keep(c)
		}
	}
}

func (s *idScan) keep(c byte) {
	if len(s.val) >= maxScannedID {
		s.bad = true
		return
	}
	s.val = append(s.val, c)
}

func (s *idScan) endKey() {
	if s.depth != 1 {
		return
	}
	if s.keyEsc {
		s.bad = true // it may spell id or method
		return
	}
	switch string(s.key) {
	case "id":
		s.ids++
		s.value, s.val = 1, s.val[:0]
	case "method":
		s.method = true
	}
}

func (s *idScan) endValue() {
	s.id = append(s.id[:0], s.val...)
	s.value = 0
}

// result is the id the line answers, or nil.
func (s *idScan) result() json.RawMessage {
	if s.method {
		return nil
	}
	return s.readableID()
}

// requestID is the id of the request the line is (a top-level object with a method member and
// one id, a string or a number that is valid JSON), or nil: what a refusal of the line answers.
func (s *idScan) requestID() json.RawMessage {
	if !s.method {
		return nil
	}
	return s.readableID()
}

func (s *idScan) readableID() json.RawMessage {
	if s.bad || s.ids != 1 || len(s.id) == 0 || !strings.ContainsRune(`"-0123456789`, rune(s.id[0])) {
		return nil // a string or a number, as ReadableID
	}
	if !json.Valid(s.id) {
		return nil // "\x" or 1abc: no id a peer could match
	}
	return json.RawMessage(append([]byte(nil), s.id...))
}
