package jsonrpc

import (
	"bytes"
	"encoding/json"
)

// ReadableID returns the id of a message that Parse refused, when the line is one JSON object
// with exactly one member named "id" (case-sensitive) that is a string or a number: the sender
// can then match the error response to its request. It returns nil (answer with id null, as
// JSON-RPC 2.0 requires when the id cannot be determined) for anything else: invalid JSON, no
// id, two ids, an id of another type.
func ReadableID(line []byte) json.RawMessage {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' || !json.Valid(line) {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil { // {
		return nil
	}
	var id json.RawMessage
	ids := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if key, _ := tok.(string); key == "id" {
			id, ids = v, ids+1
		}
	}
	if ids != 1 || len(id) == 0 {
		return nil
	}
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return oneLine(id)
	}
	return nil
}
