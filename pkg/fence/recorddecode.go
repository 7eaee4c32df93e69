package fence

import (
	"encoding/json"
	"time"
)

// DecodeRecord decodes a store's JSON of a record (EncodeRecord's, or any encoding/json
// wrote) into the record json.Unmarshal gives, except that the raw JSON values in it (the
// record's args, its cert's args and result) are not copied: they are pieces of body. body
// must be the caller's own and never change afterwards, as a row a store has just read is.
//
// A body in the shape stores write is read in one pass (decodeFast); any other goes to
// encoding/json, which decides. One difference: a cert whose readable result is not the value
// of its result_bytes is refused by Cert.UnmarshalJSON and read by DecodeRecord, which keeps
// result_bytes and never reads the readable copy (see storedCert).
//
// json.Unmarshal copies each raw value: a record of a call with 16 MiB of arguments holds them
// twice (the record's and the cert's) and reading it made two copies more, in fresh pages.
// TestDecodeRecordMatchesUnmarshal checks the two against each other on random records, and
// TestDecodeRecordWireHasEveryField that the wire types below name every field of Record and
// Cert, with their tags.
func DecodeRecord(body []byte, rec *Record) error {
	var w record
	if !decodeFast(body, &w) {
		w = record{}
		if err := json.Unmarshal(body, &w); err != nil {
			return err
		}
	}
	*rec = Record{
		Intent: w.Intent, State: w.State, Fingerprint: w.Fingerprint, Token: w.Token, Nonce: w.Nonce,
		Owner: w.Owner, Agent: w.Agent, Parent: w.Parent, Domain: w.Domain, Seq: w.Seq, Tool: w.Tool,
		Args: json.RawMessage(w.Args), ExactArgs: w.ExactArgs, ReadSet: w.ReadSet, Clock: w.Clock,
		ClaimedAt: w.ClaimedAt, LeaseUntil: w.LeaseUntil, UpdatedAt: w.UpdatedAt, ExpiresAt: w.ExpiresAt,
		Reason: w.Reason, RerunSafe: w.RerunSafe, KeepResult: w.KeepResult, Redacted: w.Redacted,
	}
	if c := w.Cert; c != nil {
		rec.Cert = &Cert{
			Intent: c.Intent, Parent: c.Parent, Domain: c.Domain, Seq: c.Seq, Tool: c.Tool,
			Args: json.RawMessage(c.Args), Result: json.RawMessage(c.Result), ResultSHA256: c.ResultSHA256,
			Clock: c.Clock, ReadSet: c.ReadSet, Agent: c.Agent, Hash: c.Hash,
		}
		if c.ResultBytes != nil { // as Cert.UnmarshalJSON takes them
			rec.Cert.Result = c.ResultBytes
		}
	}
	return nil
}

// rawPiece is json.RawMessage decoded without a copy: encoding/json hands UnmarshalJSON a
// piece of its input.
type rawPiece []byte

func (r *rawPiece) UnmarshalJSON(b []byte) error {
	*r = b[:len(b):len(b)]
	return nil
}

// record is Record as DecodeRecord reads it: the same fields and tags, raw values as
// rawPiece. (Its name is what encoding/json's errors show: "Go struct field record.tool".)
type record struct {
	Intent      string         `json:"intent"`
	State       State          `json:"state"`
	Fingerprint string         `json:"fingerprint"`
	Token       uint64         `json:"token"`
	Nonce       string         `json:"nonce,omitempty"`
	Owner       string         `json:"owner,omitempty"`
	Agent       string         `json:"agent,omitempty"`
	Parent      string         `json:"parent,omitempty"`
	Domain      string         `json:"domain,omitempty"`
	Seq         uint64         `json:"seq,omitempty"`
	Tool        string         `json:"tool"`
	Args        rawPiece       `json:"args"`
	ExactArgs   []byte         `json:"exact_args,omitempty"`
	ReadSet     []ReadSetEntry `json:"read_set,omitempty"`
	Clock       VectorClock    `json:"vector_clock,omitempty"`
	ClaimedAt   time.Time      `json:"claimed_at"`
	LeaseUntil  time.Time      `json:"lease_until"`
	UpdatedAt   time.Time      `json:"updated_at"`
	ExpiresAt   time.Time      `json:"expires_at,omitempty"`
	Reason      string         `json:"reason,omitempty"`
	Cert        *storedCert    `json:"cert,omitempty"`
	RerunSafe   bool           `json:"rerun_safe,omitempty"`
	KeepResult  KeepResult     `json:"keep_result,omitempty"`
	Redacted    []string       `json:"redacted,omitempty"`
}

// storedCert is Cert as Cert.UnmarshalJSON reads it (result_bytes beside its fields), raw
// values as rawPiece.
type storedCert struct {
	Intent       string         `json:"intent"`
	Parent       string         `json:"parent"`
	Domain       string         `json:"domain"`
	Seq          uint64         `json:"seq"`
	Tool         string         `json:"tool"`
	Args         rawPiece       `json:"args"`
	Result       rawPiece       `json:"result"`
	ResultSHA256 string         `json:"result_sha256,omitempty"`
	Clock        VectorClock    `json:"vector_clock"`
	ReadSet      []ReadSetEntry `json:"read_set"`
	Agent        string         `json:"agent"`
	Hash         string         `json:"hash"`
	ResultBytes  []byte         `json:"result_bytes"`
}

// UnmarshalJSON reads a cert into a fresh value, as Cert.UnmarshalJSON does: a record whose
// cert member comes twice (a damaged or forged row) takes the second whole. Decoded in place,
// encoding/json kept the first's members that the second lacks (its result and hash). Like
// Cert.UnmarshalJSON, it refuses a cert with a member that is not a cert's, named in another
// case or given twice (checkCertMembers), which no store writes; it does not compare the
// readable result with result_bytes, which the ledger wrote from the same bytes (a replay reads
// result_bytes alone, and comparing would canonicalise every such result read).
func (c *storedCert) UnmarshalJSON(b []byte) error {
	type fields storedCert // without this method
	var f fields
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	if err := checkCertMembers(b); err != nil {
		return err
	}
	*c = storedCert(f)
	return nil
}
