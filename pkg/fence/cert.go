package fence

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/effectfence/effectfence/pkg/canon"
)

// Cert (EffectCert) records one executed effect. Hash is the lowercase hex SHA-256 of the
// RFC 8785 canonical JSON of the object made of every other field, all ten always present
// (empty strings, 0, [] and {} included). Any language with a JCS library can recompute it;
// docs/CERTS.md gives the recipe and a test vector.
type Cert struct {
	Intent  string          `json:"intent"`
	Parent  string          `json:"parent"`
	Domain  string          `json:"domain"`
	Seq     uint64          `json:"seq"`
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args"`
	Result  json.RawMessage `json:"result"`
	Clock   VectorClock     `json:"vector_clock"`
	ReadSet []ReadSetEntry  `json:"read_set"`
	Agent   string          `json:"agent"`
	Hash    string          `json:"hash"`
}

// ComputeHash returns the hash the cert should carry, from every field but Hash.
func (c *Cert) ComputeHash() (string, error) {
	b, err := c.canonicalBody(false)
	if err != nil {
		return "", fmt.Errorf("cert of intent %q: %w", c.Intent, err)
	}
	return canon.Sum(b), nil
}

// maxExactSeq is the largest integer RFC 8785 prints as plain digits (IEEE double precision).
const maxExactSeq = 1 << 53

// canonicalBody assembles the RFC 8785 form of the cert without its hash. The members are
// written in JCS order (agent, args, domain, intent, parent, read_set, result, seq, tool,
// vector_clock); args and result are canonicalised by the library; strings and integers are
// written as JCS writes them. TestCertCanonicalMatchesLibrary and FuzzCertCanonical check it
// byte for byte against the library's canonicalisation of the naive JSON.
//
// trusted skips re-canonicalising args and result: the engine passes true for the values it
// canonicalised itself.
func (c *Cert) canonicalBody(trusted bool) ([]byte, error) {
	args, result := orNull(c.Args), orNull(c.Result)
	if !trusted {
		var err error
		if args, err = canon.JSON(args); err != nil {
			return nil, fmt.Errorf("args: %w", err)
		}
		if result, err = canon.JSON(result); err != nil {
			return nil, fmt.Errorf("result: %w", err)
		}
	}
	if c.Seq > maxExactSeq {
		return nil, fmt.Errorf("seq %d exceeds 2^53", c.Seq)
	}
	b := make([]byte, 0, 160+len(args)+len(result)+len(c.Intent)+len(c.Tool)+len(c.Parent)+len(c.Domain)+32*len(c.ReadSet))
	b = append(b, `{"agent":`...)
	b = canon.AppendString(b, c.Agent)
	b = append(b, `,"args":`...)
	b = append(b, args...)
	b = append(b, `,"domain":`...)
	b = canon.AppendString(b, c.Domain)
	b = append(b, `,"intent":`...)
	b = canon.AppendString(b, c.Intent)
	b = append(b, `,"parent":`...)
	b = canon.AppendString(b, c.Parent)
	b = append(b, `,"read_set":[`...)
	for i, r := range c.ReadSet {
		if r.Seq > maxExactSeq {
			return nil, fmt.Errorf("read_set seq %d exceeds 2^53", r.Seq)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"domain":`...)
		b = canon.AppendString(b, r.Domain)
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, r.Seq, 10)
		b = append(b, '}')
	}
	b = append(b, `],"result":`...)
	b = append(b, result...)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, c.Seq, 10)
	b = append(b, `,"tool":`...)
	b = canon.AppendString(b, c.Tool)
	b = append(b, `,"vector_clock":`...)
	b = append(b, c.Clock.Canonical()...)
	return append(b, '}'), nil
}

// Verify recomputes the hash and reports a mismatch (a tampered or corrupted cert).
func (c *Cert) Verify() error {
	h, err := c.ComputeHash()
	if err != nil {
		return err
	}
	if h != c.Hash {
		return fmt.Errorf("cert of intent %q does not verify: recorded hash %s, content hashes to %s", c.Intent, c.Hash, h)
	}
	return nil
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}
