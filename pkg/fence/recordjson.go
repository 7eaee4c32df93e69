package fence

import (
	"bytes"
	"encoding/json"
	"sync"
)

// EncodeRecord is the JSON a store keeps for rec: encoding/json's, except that the raw JSON
// values inside it (the canonical args, and a cert's args and readable result) are kept as
// they are. json.Marshal rewrites <, >, & and U+2028/U+2029 inside raw values as \u escapes,
// so a store that used it gave back other bytes than it was given, and a cert committed from
// such a claim was hashed over args that were no longer canonical: it did not verify, and its
// hash differed from the same call's on the memory store. json.Unmarshal reads both forms.
func EncodeRecord(rec *Record) ([]byte, error) { return marshalRaw(rec) }

// marshalRaw is json.Marshal without HTML escaping. Its encoders and their buffers are pooled
// (a store encodes a record per write; json.Marshal pools its own state the same way).
func marshalRaw(v any) ([]byte, error) {
	e := rawEncoders.Get().(*rawEncoder)
	defer e.release()
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n"))), nil
}

type rawEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var rawEncoders = sync.Pool{New: func() any {
	e := &rawEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

func (e *rawEncoder) release() {
	if e.buf.Cap() > 64<<10 {
		return // a large record's buffer is not kept
	}
	e.buf.Reset()
	rawEncoders.Put(e)
}

// escapedByOldStores reports whether raw JSON may hold a \u escape that canonical JSON never
// writes (\u003c for <, say): args recorded by a store before EncodeRecord. RFC 8785 writes
// \u only for control characters, so a false positive costs one canonicalisation.
func escapedByOldStores(raw []byte) bool { return bytes.Contains(raw, []byte(`\u`)) }
