package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// JSONValue is any JSON value, kept as the caller sent it (the engine canonicalises it).
type JSONValue json.RawMessage

// MarshalJSON writes the value, or null when it is empty.
func (v JSONValue) MarshalJSON() ([]byte, error) {
	if len(v) == 0 {
		return []byte("null"), nil
	}
	return v, nil
}

// UnmarshalJSON keeps a copy of the raw value.
func (v *JSONValue) UnmarshalJSON(b []byte) error {
	*v = append((*v)[:0], b...)
	return nil
}

// ArgsValue is the arguments of the fenced call: a JSON object or null.
type ArgsValue json.RawMessage

// MarshalJSON writes the value, or null when it is empty.
func (v ArgsValue) MarshalJSON() ([]byte, error) { return JSONValue(v).MarshalJSON() }

// UnmarshalJSON accepts an object or null and refuses anything else.
func (v *ArgsValue) UnmarshalJSON(b []byte) error {
	t := bytes.TrimSpace(b)
	if len(t) == 0 || (t[0] != '{' && !bytes.Equal(t, []byte("null"))) {
		return fence.InvalidError{Field: "args", Why: "must be a JSON object or null"}
	}
	*v = append((*v)[:0], b...)
	return nil
}

// The input of each tool. The JSON schemas the server publishes are generated from these types
// (schema.go), and every call is validated against them before it is decoded.

// PrepareInput is the input of fence_prepare.
type PrepareInput struct {
	Intent   string               `json:"intent" jsonschema:"Stable id of the logical action, e.g. charge:order-123. Every attempt of the same action (retries, re-dispatches, other agents deciding the same thing) must use the same intent."`
	Tool     string               `json:"tool" jsonschema:"Name of the side effect you are about to run, e.g. charge_card. Part of the action's fingerprint."`
	Args     ArgsValue            `json:"args,omitempty" jsonschema:"Arguments of the side effect (an object, or null; left out, null and {} are the same args). Part of the fingerprint: the same intent with different tool or args is refused as intent_conflict."`
	Domain   string               `json:"domain,omitempty" jsonschema:"Contention scope whose next sequence number this effect takes, e.g. order:123. Omit for an effect that contends only with its own duplicates."`
	ReadSet  []fence.ReadSetEntry `json:"read_set,omitempty" jsonschema:"The state your decision was based on: domains and the seq you read with fence_status. If any moved, the attempt is refused before it runs."`
	Parent   string               `json:"parent,omitempty" jsonschema:"Hash of the cert this action causally follows, if any."`
	Agent    string               `json:"agent,omitempty" jsonschema:"Who decides (your agent name); its counter is ticked in the cert's vector clock."`
	Clock    fence.VectorClock    `json:"vector_clock,omitempty" jsonschema:"The vector clock you knew when you decided (agent name to counter)."`
	WaitSecs float64              `json:"wait_secs,omitempty" jsonschema:"If another attempt is running this intent, wait up to this many seconds (at most 60) for its outcome instead of being refused with intent_in_flight."`
	Redact   []string             `json:"redact,omitempty" jsonschema:"Argument fields the ledger must not keep, as dotted paths (card.number; * matches every member or element: items.*.cvv). They are stored as [redacted]; the fingerprint still uses the full args."`
	// KeepResult is "full" (default) or "hash"; the schema lists the two (serve.go).
	KeepResult string `json:"keep_result,omitempty" jsonschema:"What the ledger keeps of the result: full (default; duplicates receive it) or hash (only its SHA-256; duplicates are told the effect was done and when, but get no result)."`
}

// UnmarshalJSON reads the input of fence_prepare with the seq of each read_set entry and the
// counters of vector_clock spelled as any JSON number of the same whole number (3, 3.0, 3e0,
// 30e-1), as TicketHandle reads a ticket's: the published schema calls them integers, which
// JSON Schema reads by value, and encoding/json refused 3.0 after the schema had passed it. A
// number that is not a whole number in uint64's range is refused.
func (in *PrepareInput) UnmarshalJSON(b []byte) error {
	type plain PrepareInput // without this method
	var v struct {
		plain
		ReadSet []struct {
			Domain string      `json:"domain"`
			Seq    json.Number `json:"seq"`
		} `json:"read_set,omitempty"`
		Clock map[string]json.Number `json:"vector_clock,omitempty"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*in = PrepareInput(v.plain)
	if v.ReadSet != nil {
		in.ReadSet = make([]fence.ReadSetEntry, len(v.ReadSet))
		for i, e := range v.ReadSet {
			seq, err := wholeNumber("read_set seq", e.Seq)
			if err != nil {
				return fence.InvalidError{Field: "read_set", Why: err.Error()}
			}
			in.ReadSet[i] = fence.ReadSetEntry{Domain: e.Domain, Seq: seq}
		}
	}
	if v.Clock != nil {
		clock := make(fence.VectorClock, len(v.Clock))
		for agent, n := range v.Clock {
			count, err := wholeNumber("vector_clock counter", n)
			if err != nil {
				return fence.InvalidError{Field: "vector_clock", Why: err.Error()}
			}
			clock[agent] = count
		}
		in.Clock = clock.Normal()
	}
	return nil
}

// TicketHandle is a ticket as an agent hands it back. Only intent, token and nonce carry
// authority; the engine checks them against its own record. The other fields of the ticket
// fence_prepare gave out are accepted so the ticket can be passed back unchanged, and ignored,
// but for keep_hash: a commit that comes after its claim was cleared keeps only the digest of
// its result in the audit trail (a mark that can only make the ledger keep less).
type TicketHandle struct {
	Intent     string    `json:"intent"`
	Token      uint64    `json:"token"`
	Nonce      string    `json:"nonce"`
	Domain     string    `json:"domain,omitempty"`
	Seq        uint64    `json:"seq,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	Reclaimed  bool      `json:"reclaimed,omitempty"`
	KeepHash   bool      `json:"keep_hash,omitempty"`
}

// UnmarshalJSON reads a ticket whose token and seq may be spelled as any JSON number of the
// same integer (2, 2.0, 2e0, 20e-1): the published schema calls them integers, which JSON
// Schema reads by value, and a client that keeps numbers as doubles writes them so. A number
// that is not a whole number in uint64's range is refused, as encoding/json refuses it.
func (h *TicketHandle) UnmarshalJSON(b []byte) error {
	type plain TicketHandle // without this method
	var v struct {
		plain
		Token json.Number `json:"token"`
		Seq   json.Number `json:"seq,omitempty"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	token, err := wholeNumber("ticket token", v.Token)
	if err != nil {
		return err
	}
	seq, err := wholeNumber("ticket seq", v.Seq)
	if err != nil {
		return err
	}
	*h = TicketHandle(v.plain)
	h.Token, h.Seq = token, seq
	return nil
}

// wholeNumber is n's value when n is a whole number in uint64's range, whatever its spelling;
// 0 when n is absent.
func wholeNumber(field string, n json.Number) (uint64, error) {
	if n == "" {
		return 0, nil
	}
	if u, err := strconv.ParseUint(string(n), 10, 64); err == nil {
		return u, nil
	}
	bad := fmt.Errorf("%s %.70s is not a whole number from 0 to %d", field, n, uint64(math.MaxUint64))
	// Bounded before big.Rat sees it: 1e999999999 would take it minutes and gigabytes.
	if len(n) > 64 {
		return 0, bad
	}
	if i := strings.IndexAny(string(n), "eE"); i >= 0 {
		if exp, err := strconv.Atoi(string(n[i+1:])); err != nil || exp > 40 || exp < -64 {
			return 0, bad
		}
	}
	r, ok := new(big.Rat).SetString(string(n))
	if !ok || !r.IsInt() || r.Sign() < 0 || !r.Num().IsUint64() {
		return 0, bad
	}
	return r.Num().Uint64(), nil
}

// Ticket returns the engine's ticket with the fields that carry authority, and its keep_hash
// mark.
func (h TicketHandle) Ticket() fence.Ticket {
	return fence.Ticket{Intent: h.Intent, Token: h.Token, Nonce: h.Nonce, KeepHash: h.KeepHash}
}

// CommitInput is the input of fence_commit.
type CommitInput struct {
	Ticket TicketHandle `json:"ticket" jsonschema:"The ticket fence_prepare gave you, unchanged."`
	Result JSONValue    `json:"result" jsonschema:"The effect's result (any JSON value); recorded in the cert and replayed to every duplicate."`
}

// EndInput is the input of fence_abort.
type EndInput struct {
	Ticket TicketHandle `json:"ticket" jsonschema:"The ticket fence_prepare gave you, unchanged."`
	Reason string       `json:"reason,omitempty" jsonschema:"What happened, for the operator."`
}

// ReleaseInput is the input of fence_release: EndInput, and whether the effect ran and failed
// definitely (Failed). Left out, Failed is false: the plain release it always was.
type ReleaseInput struct {
	Ticket TicketHandle `json:"ticket" jsonschema:"The ticket fence_prepare gave you, unchanged."`
	Reason string       `json:"reason,omitempty" jsonschema:"What happened, for the operator (with failed: true, also for the agents that waited: say why it failed)."`
	Failed bool         `json:"failed,omitempty" jsonschema:"true: the effect ran and failed definitely (the service answered an error and changed nothing). The intent is free as with a plain release, but an agent whose fence_prepare waited on this attempt (wait_secs), in this server or another on the same ledger, is told it failed (code waited_attempt_failed) instead of being told to run it. Left out or false: it did not run, and such an agent runs it."`
}

// HeartbeatInput is the input of fence_heartbeat.
type HeartbeatInput struct {
	Ticket TicketHandle `json:"ticket" jsonschema:"The ticket fence_prepare (or the last heartbeat) gave you."`
}

// StatusInput is the input of fence_status. Without a proof (the intent's ticket, or the same
// tool and args) the answer carries state, times and hashes only.
type StatusInput struct {
	Intent string        `json:"intent,omitempty" jsonschema:"An intent whose recorded state you want (may be left out when ticket is given: the ticket's intent is read)."`
	Domain string        `json:"domain,omitempty" jsonschema:"A domain whose current sequence number you want (to put in a read_set)."`
	Ticket *TicketHandle `json:"ticket,omitempty" jsonschema:"Proof: the ticket fence_prepare gave you for this intent. With it (or with tool and args) the answer includes the tool, args, result, agent and reason."`
	Tool   string        `json:"tool,omitempty" jsonschema:"Proof: the tool of the call you prepared (with args)."`
	Args   ArgsValue     `json:"args,omitempty" jsonschema:"Proof: the same args you prepared the intent with (an object, or null; left out, null and {} are the same args)."`
}

// StatsInput is the (empty) input of fence_stats.
type StatsInput struct{}

// The results. Each is sent as JSON in a text block and as structuredContent.

// PrepareResult is the answer of fence_prepare.
type PrepareResult struct {
	// Status is "fresh" (run the effect now, once) or "already_done" (do not run it).
	Status string        `json:"status"`
	Ticket *fence.Ticket `json:"ticket,omitempty"`
	Cert   *fence.Cert   `json:"cert,omitempty"`
	// DoneAt is when the effect was done (with already_done).
	DoneAt *time.Time `json:"done_at,omitempty"`
	// ResultNotKept is true when the intent was prepared with keep_result "hash": the ledger
	// has only the result's SHA-256 (in cert.result), not the result.
	ResultNotKept bool `json:"result_not_kept,omitempty"`
	// ResultInBytes is true when cert.result is null because the result cannot be given
	// there (it is not valid UTF-8, or nests deeper than fence.MaxNesting): cert.result_bytes
	// (base64) holds it, exactly as it was committed.
	ResultInBytes bool   `json:"result_in_bytes,omitempty"`
	Next          string `json:"next"`
}

// Prepare statuses.
const (
	StatusFresh       = "fresh"
	StatusAlreadyDone = "already_done"
)

// CommitResult is the answer of fence_commit.
type CommitResult struct {
	Cert *fence.Cert `json:"cert"`
	Next string      `json:"next"`
}

// EndResult is the answer of fence_abort and fence_release.
type EndResult struct {
	Intent string      `json:"intent"`
	State  fence.State `json:"state"` // failed after abort, none after release
	Next   string      `json:"next"`
}

// HeartbeatResult is the answer of fence_heartbeat.
type HeartbeatResult struct {
	Ticket fence.Ticket `json:"ticket"`
	Next   string       `json:"next"`
}

// IntentStatus is what fence_status tells about an intent. It never carries the claim's
// nonce: the ledger's view must not be enough to forge a ticket. Tool, agent, reason, the
// fingerprint and the cert (args and result) are shown only to a caller that proved it made
// the call (Withheld says so otherwise); state, times and the other hashes are shown to anyone
// who names the intent. The fingerprint is an unsalted SHA-256 of the full call, so whoever
// holds it can test guesses of a redacted value offline.
type IntentStatus struct {
	Intent      string           `json:"intent"`
	State       fence.State      `json:"state"`
	Fingerprint string           `json:"fingerprint,omitempty"`
	Token       uint64           `json:"token,omitempty"`
	Agent       string           `json:"agent,omitempty"`
	Domain      string           `json:"domain,omitempty"`
	Seq         uint64           `json:"seq,omitempty"`
	Tool        string           `json:"tool,omitempty"`
	LeaseUntil  *time.Time       `json:"lease_until,omitempty"`
	UpdatedAt   *time.Time       `json:"updated_at,omitempty"`
	ExpiresAt   *time.Time       `json:"expires_at,omitempty"`
	Reason      string           `json:"reason,omitempty"`
	CertHash    string           `json:"cert_hash,omitempty"`
	KeepResult  fence.KeepResult `json:"keep_result,omitempty"`
	Cert        *fence.Cert      `json:"cert,omitempty"`
	// ResultInBytes: cert.result is null, and cert.result_bytes alone holds the result (as
	// PrepareResult's).
	ResultInBytes bool   `json:"result_in_bytes,omitempty"`
	Withheld      string `json:"withheld,omitempty"`
}

// DomainStatus is a domain's current sequence number.
type DomainStatus struct {
	Domain string `json:"domain"`
	Seq    uint64 `json:"seq"`
}

// StatusResult is the answer of fence_status.
type StatusResult struct {
	Intent *IntentStatus `json:"intent,omitempty"`
	Domain *DomainStatus `json:"domain,omitempty"`
}

// StatsResult is the answer of fence_stats.
type StatsResult struct {
	SinceBoot StatsCounts `json:"since_boot"`
	Ledger    StatsCounts `json:"ledger"`
	Line      string      `json:"line"`
}

// StatsCounts are the counters with the two sums SPEC's stats name: every attempt
// (total_attempts, each in exactly one bucket) and those that did not execute the effect
// (prevented), as `effectfence ledger stats --json` gives them for the ledger.
type StatsCounts struct {
	fence.Counters
	TotalAttempts uint64 `json:"total_attempts"`
	Prevented     uint64 `json:"prevented"`
}

func statsCounts(c fence.Counters) StatsCounts {
	return StatsCounts{Counters: c, TotalAttempts: c.Total(), Prevented: c.Prevented()}
}

// Refusal is the JSON of every tool error: the stable code, the facts and what to do next.
type Refusal struct {
	Code       string      `json:"code"`
	Message    string      `json:"message"`
	Intent     string      `json:"intent,omitempty"`
	Domain     string      `json:"domain,omitempty"`
	Expected   *uint64     `json:"expected,omitempty"`
	Actual     *uint64     `json:"actual,omitempty"`
	Holder     *string     `json:"holder,omitempty"`
	LeaseUntil *time.Time  `json:"lease_until,omitempty"`
	State      fence.State `json:"state,omitempty"`
	Field      string      `json:"field,omitempty"`
	// Executed is true when the effect already ran: every refusal of a commit (the agent ran
	// the effect it reports, recorded or not), and a prepare never.
	Executed bool `json:"executed"`
	// Cert is the recorded cert, on result_differs; ResultInBytes says its result is null and
	// cert.result_bytes alone holds the result (as PrepareResult's).
	Cert          *fence.Cert `json:"cert,omitempty"`
	ResultInBytes bool        `json:"result_in_bytes,omitempty"`
	// Spooled, on a store_error of fence_commit, fence_release or fence_abort, is the spool
	// file that keeps the outcome until the ledger takes it.
	Spooled string `json:"spooled,omitempty"`
	Next    string `json:"next"`
}

// statusOf describes a record; with proven false it leaves out everything but state, times
// and hashes.
func statusOf(r fence.Record, proven bool) *IntentStatus {
	s := &IntentStatus{
		Intent: r.Intent, State: r.State, Token: r.Token,
		Domain: r.Domain, Seq: r.Seq, KeepResult: r.KeepResult,
	}
	if r.Cert != nil {
		s.CertHash = r.Cert.Hash
	}
	if r.State == fence.StateNone {
		return s
	}
	if proven {
		s.Fingerprint, s.Agent, s.Tool, s.Reason, s.Cert = r.Fingerprint, r.Agent, r.Tool, r.Reason, r.Cert
		s.ResultInBytes = r.Cert != nil && !r.Cert.ResultReadable()
	} else {
		s.Withheld = withheld
	}
	if r.State == fence.StateInFlight {
		s.LeaseUntil = timePtr(r.LeaseUntil)
	}
	s.UpdatedAt = timePtr(r.UpdatedAt)
	s.ExpiresAt = timePtr(r.ExpiresAt)
	return s
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
