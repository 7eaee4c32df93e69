package jsonrpc

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/effectfence/effectfence/pkg/canon"
)

// ReadableID returns the id of a message that Parse refused, when the line is one JSON object
// with exactly one member named "id" (case-sensitive) that is a string or a number: the sender
// can then match the error response to its request. It returns nil (answer with id null, as
// JSON-RPC 2.0 requires when the id cannot be determined) for anything else: invalid JSON, no
// id, two ids, an id of another type. A leading byte order mark, which Parse refuses, is read
// past: the message after it is what the sender meant.
func ReadableID(line []byte) json.RawMessage {
	line = bytes.TrimPrefix(bytes.TrimSpace(line), []byte(byteOrderMark))
	// Any depth: a message nested deeper than encoding/json reads (10,000 levels) is refused,
	// but its id is still readable, and the sender waits for the answer under it.
	if len(line) == 0 || line[0] != '{' || !canon.ValidAnyDepth(line) {
		return nil
	}
	vs, ve, ids, _ := Member(line, "id")
	if ids != 1 {
		return nil
	}
	id := line[vs:ve]
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return oneLine(id)
	}
	return nil
}

// AnswerID returns the id a message that Parse refused answers: ReadableID of a line with no
// "method" member, so neither a request nor a notification (whose id, if any, is the
// sender's own). A transport waiting for that id has had its answer, only not a valid one;
// nil when the line names no id this way.
func AnswerID(line []byte) json.RawMessage {
	id := ReadableID(line)
	if id == nil {
		return nil
	}
	if _, _, methods, _ := Member(line, "method"); methods != 0 {
		return nil
	}
	return id
}

// logIDMax is the most bytes of an id LogID keeps.
const logIDMax = 100

// LogID is id as a log line shows it: its first bytes and its length when it is long. An id is
// any JSON value its sender chose, and a line that names one a peer sent (an answer to no
// request, say) wrote it whole: an agent's response with a 60 MiB id logged a 251 MB line. The
// cut may fall inside a character; the log escapes what it writes.
func LogID(id []byte) string {
	if len(id) <= logIDMax {
		return string(id)
	}
	return fmt.Sprintf("%s… (%d bytes)", id[:logIDMax], len(id))
}
