package fence

import (
	"encoding/json"
	"fmt"

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

// certBody is Cert without its hash: the object that is hashed.
type certBody struct {
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
}

// ComputeHash returns the hash the cert should carry, from every field but Hash.
func (c *Cert) ComputeHash() (string, error) {
	body := certBody{c.Intent, c.Parent, c.Domain, c.Seq, c.Tool, orNull(c.Args), orNull(c.Result), c.Clock, c.ReadSet, c.Agent}
	if body.ReadSet == nil {
		body.ReadSet = []ReadSetEntry{}
	}
	b, err := canon.Marshal(body)
	if err != nil {
		return "", fmt.Errorf("cert of intent %q: %w", c.Intent, err)
	}
	return canon.Sum(b), nil
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
