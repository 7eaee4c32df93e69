package serve

import (
	"crypto/subtle"
	"fmt"

	"github.com/effectfence/effectfence/pkg/fence"
)

// Every serve process on a host shares one ledger, so an intent id is no secret: fence_status
// shows an intent's tool, args, result, agent and reason only to a caller that proves it made
// the call, with the intent's live ticket or with the very tool and args (the same proof
// fence_prepare accepts before it replays a cert).

const withheld = "tool, args, result, agent, reason and fingerprint are shown only with proof: pass this intent's ticket, or the tool and args it was prepared with"

// CodeResultDiffers is the code of a commit whose result is not the one recorded.
const CodeResultDiffers = "result_differs"

// ResultDiffersError: a commit retried with the ticket that already committed carried a
// different result. Nothing new was recorded; Cert is what was.
type ResultDiffersError struct {
	Cert *fence.Cert
}

func (e ResultDiffersError) Error() string {
	return fmt.Sprintf("%s: intent %q is already done with a different result (cert %s); the result sent now was NOT recorded", CodeResultDiffers, e.Cert.Intent, e.Cert.Hash)
}

// Code returns the stable code.
func (e ResultDiffersError) Code() string { return CodeResultDiffers }

// provesCall reports whether in carries proof that its caller made the call recorded in rec.
func (s *Server) provesCall(rec fence.Record, in StatusInput) (bool, error) {
	if rec.State == fence.StateNone {
		return false, nil
	}
	if t := in.Ticket; t != nil && t.Intent == rec.Intent && t.Token == rec.Token && rec.Nonce != "" &&
		subtle.ConstantTimeCompare([]byte(t.Nonce), []byte(rec.Nonce)) == 1 {
		return true, nil
	}
	if in.Tool == "" && len(in.Args) == 0 {
		return false, nil
	}
	fps, err := s.eng.Fingerprints(in.Tool, in.Args, true) // absent, null and {} alike, as fence_prepare takes them
	if err != nil {
		return false, err
	}
	proven := false
	for _, fp := range fps {
		proven = subtle.ConstantTimeCompare([]byte(fp), []byte(rec.Fingerprint)) == 1 || proven
	}
	return proven, nil
}
