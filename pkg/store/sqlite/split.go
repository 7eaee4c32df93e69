package sqlite

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/effectfence/effectfence/pkg/fence"
)

// Since schema 3 a record whose arguments are large is stored split (docs/DECISIONS-sqlite.md,
// "Schema 3"): its arguments, and the copies of them the body holds (the base64 of the exact
// arguments, the cert's args), sit in record_args, keyed by the record's rowid, and its body
// holds the rest with the places they were cut from. A commit rewrites the record's row, which
// is now small, and leaves record_args as it is when the arguments are the bytes already there
// (qPutArgs compares them where they are): before, it wrote every overflow page of the
// arguments again (22 WAL frames for a 64 KB record, where the claim wrote 13).
//
// A split body is:
//
//	0x00 | SHA-256 of the pieces (32 bytes) | uvarint number of cuts | per cut: uvarint
//	position in the rest, uvarint offset in the pieces, uvarint length | the rest
//
// where the rest is the record's encoding (fence.EncodeRecord) with the cut bytes left out, and
// the pieces are record_args.bytes. Joining gives the encoding back byte for byte: the cuts
// hold the very bytes taken out, whatever they are, so a reader sees exactly the record it saw
// when the body held them. A record's encoding is JSON and starts with '{', so a body starting
// with 0x00 is split and every other one (every body schema 1 and 2 wrote) is whole.
//
// The digest makes a split body name its pieces: two bodies that are equal hold equal records,
// which the cache of decoded records (decoded.go) relies on when it compares only bodies.
const splitMark = 0x00

// splitMin is the least number of bytes of arguments (and their copies) that Put stores
// apart. Smaller arguments stay in the body: a done record holding them twice about fits a
// leaf page, which a commit writes anyway, while record_args costs the claim a page more.
// TestCommitKeepsArguments measured WAL frames per claim + commit, whole against split: 10.5
// against 10.2 at 1.7 KB of arguments, 12 against 11.2 at 2.5 KB, 14.2 against 11.2 at 4 KB,
// 34 against 18.2 at 32 KB.
const splitMin = 2048

// maxCuts bounds the cuts a split body may list (Put makes at most three).
const maxCuts = 8

// qPutSplit is qPut for a split record, returning the rowid that keys its pieces.
const qPutSplit = qPut + " RETURNING id"

// qPutArgs stores a split record's pieces, and leaves them unwritten when record_args holds
// these very bytes already (the commit of a claim: the arguments did not change).
const qPutArgs = `INSERT INTO record_args(id, bytes) VALUES (?, ?)
	ON CONFLICT(id) DO UPDATE SET bytes = excluded.bytes WHERE bytes IS NOT excluded.bytes`

// qPieces reads a split record's pieces. It is not prepared ahead: a read-only store over a
// ledger of schema 2 has no record_args table, and no split body either.
const qPieces = "SELECT bytes FROM record_args WHERE id = (SELECT id FROM records WHERE intent = ?)"

// isSplit reports whether a records row's body is split.
func isSplit(body []byte) bool { return len(body) > 0 && body[0] == splitMark }

// cut is one place of a split body: the piece pieces[from:from+n] goes at position at of the
// rest.
type cut struct{ at, from, n int }

// splitBody splits rec's encoding enc when its arguments and their copies come to splitMin
// bytes or more: the body to store and the pieces; ok is false when enc is to be stored
// whole. Where it finds the arguments does not matter for correctness, only for the saving:
// every cut is checked to hold the piece's bytes exactly.
func splitBody(rec *fence.Record, enc []byte) (body, pieces []byte, ok bool) {
	args := []byte(rec.Args)
	if len(args) == 0 {
		args = []byte("null")
	}
	var cuts []cut
	var exact []byte
	// The record's own args: the first `,"args":` of the encoding is its member, since every
	// member before it is a string or a number, and a JSON string holds no bare quote.
	i := bytes.Index(enc, []byte(`,"args":`))
	end := 0
	if i >= 0 {
		p := i + len(`,"args":`)
		if bytes.HasPrefix(enc[p:], args) {
			cuts = append(cuts, cut{at: p, from: 0, n: len(args)})
			end = p + len(args)
			const key = `,"exact_args":"`
			if bytes.HasPrefix(enc[end:], []byte(key)) {
				e0 := end + len(key)
				if n := bytes.IndexByte(enc[e0:], '"'); n > 0 {
					exact = enc[e0 : e0+n]
					cuts = append(cuts, cut{at: e0, from: len(args), n: n})
					end = e0 + n
				}
			}
		}
	}
	if len(cuts) == 0 || len(args)+len(exact) < splitMin {
		return nil, nil, false
	}
	// The cert's copy of the args: its members before args are strings and a number too.
	if c := bytes.Index(enc[end:], []byte(`,"cert":{"intent":`)); c >= 0 {
		c += end
		if j := bytes.Index(enc[c:], []byte(`,"args":`)); j >= 0 {
			p := c + j + len(`,"args":`)
			if bytes.HasPrefix(enc[p:], args) {
				cuts = append(cuts, cut{at: p, from: 0, n: len(args)})
			}
		}
	}
	pieces = make([]byte, 0, len(args)+len(exact))
	pieces = append(append(pieces, args...), exact...)
	sum := sha256.Sum256(pieces)
	kept := len(enc)
	for _, c := range cuts {
		kept -= c.n
	}
	body = make([]byte, 0, 1+len(sum)+binary.MaxVarintLen64*(1+3*len(cuts))+kept)
	body = append(append(body, splitMark), sum[:]...)
	body = binary.AppendUvarint(body, uint64(len(cuts)))
	removed := 0
	for _, c := range cuts {
		body = binary.AppendUvarint(body, uint64(c.at-removed))
		body = binary.AppendUvarint(body, uint64(c.from))
		body = binary.AppendUvarint(body, uint64(c.n))
		removed += c.n
	}
	prev := 0
	for _, c := range cuts {
		body = append(body, enc[prev:c.at]...)
		prev = c.at + c.n
	}
	return append(body, enc[prev:]...), pieces, true
}

var errSplit = errors.New("damaged split record")

// joinBody gives back the encoding a split body and its pieces were made from.
func joinBody(body, pieces []byte) ([]byte, error) {
	if !isSplit(body) || len(body) < 1+sha256.Size {
		return nil, errSplit
	}
	rest := body[1+sha256.Size:]
	count, k := binary.Uvarint(rest)
	if k <= 0 || count > maxCuts {
		return nil, fmt.Errorf("%w: bad cut count", errSplit)
	}
	rest = rest[k:]
	cuts := make([]cut, count)
	total := 0
	for i := range cuts {
		var v [3]uint64
		for j := range v {
			if v[j], k = binary.Uvarint(rest); k <= 0 {
				return nil, fmt.Errorf("%w: bad cut", errSplit)
			}
			rest = rest[k:]
		}
		at, from, n := v[0], v[1], v[2]
		if from > uint64(len(pieces)) || n > uint64(len(pieces))-from {
			return nil, fmt.Errorf("%w: a cut of %d bytes at %d, pieces of %d", errSplit, n, from, len(pieces))
		}
		cuts[i] = cut{at: int(min(at, 1<<40)), from: int(from), n: int(n)}
		total += int(n)
	}
	out := make([]byte, 0, len(rest)+total)
	prev := 0
	for _, c := range cuts {
		if c.at < prev || c.at > len(rest) {
			return nil, fmt.Errorf("%w: cuts out of order", errSplit)
		}
		out = append(out, rest[prev:c.at]...)
		out = append(out, pieces[c.from:c.from+c.n]...)
		prev = c.at
	}
	return append(out, rest[prev:]...), nil
}

// splitSum is the digest of the pieces a split body names.
func splitSum(body []byte) []byte { return body[1 : 1+sha256.Size] }

// checkPieces reports whether pieces are the ones a split body names.
func checkPieces(body, pieces []byte) bool {
	sum := sha256.Sum256(pieces)
	return len(body) >= 1+sha256.Size && bytes.Equal(splitSum(body), sum[:])
}

// wholeSize is the length of the record's whole encoding that body stands for: len(body) for
// a whole body; for a split one, as its cuts tell (a damaged one: len(body)).
func wholeSize(body []byte) int {
	if !isSplit(body) || len(body) < 1+sha256.Size {
		return len(body)
	}
	rest := body[1+sha256.Size:]
	count, k := binary.Uvarint(rest)
	if k <= 0 || count > maxCuts {
		return len(body)
	}
	rest = rest[k:]
	total := 0
	for range count {
		for j := range 3 {
			v, k := binary.Uvarint(rest)
			if k <= 0 || v > 1<<40 {
				return len(body)
			}
			rest = rest[k:]
			if j == 2 {
				total += int(v)
			}
		}
	}
	return len(rest) + total
}
