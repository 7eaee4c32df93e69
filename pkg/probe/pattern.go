package probe

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// Pattern is how the identical calls are sent.
type Pattern string

const (
	// Storm sends every call at the same instant: duplicates that race.
	Storm Pattern = "storm"
	// Retry sends one call, waits for its answer or RetryAfter, then sends the same call
	// again, and so on: an agent retrying after a timeout, a redelivered message. A call that
	// timed out is still awaited; its answer counts like any other.
	Retry Pattern = "retry"
)

// ParsePattern accepts "storm" (also "") or "retry".
func ParsePattern(s string) (Pattern, error) {
	switch Pattern(s) {
	case "", Storm:
		return Storm, nil
	case Retry:
		return Retry, nil
	}
	return "", fmt.Errorf("--pattern must be storm or retry, got %q", s)
}

// WitnessKind is what a witness's number counts.
type WitnessKind string

const (
	// Executions: the number rises by exactly one each time the tool runs (an append-only
	// log of runs, an execution counter). Its difference is the number of executions.
	Executions WitnessKind = "executions"
	// State: the number reads the resulting state (rows, entities, a file's size). Executions
	// can collapse into one state (an overwrite, a read-modify-write race), so a small change
	// proves nothing about how often the tool ran.
	State WitnessKind = "state"
)

// ParseWitnessKind accepts "executions" or "state" ("" is state: the weaker claim).
func ParseWitnessKind(s string) (WitnessKind, error) {
	switch WitnessKind(s) {
	case "", State:
		return State, nil
	case Executions:
		return Executions, nil
	}
	return "", fmt.Errorf("--witness-kind must be executions or state, got %q", s)
}

// errNotSent marks a call that was never sent because the timeout passed first.
var errNotSent = errors.New("not sent: --timeout passed before its turn")

// timedOut is a call's error as the report counts it once the probe's timeout passed: not
// sent (errNotSent) when it was never written, so it did not run; no answer, it may have run,
// when it was.
func timedOut(err error, timeout time.Duration) error {
	switch {
	case errors.Is(err, mcpstdio.ErrNotSent) && errors.Is(err, context.DeadlineExceeded):
		return errNotSent
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer within %s (the call may still have run)", timeout)
	}
	return err
}

// DefaultRetryAfter is how long the retry pattern waits for an answer before calling again.
const DefaultRetryAfter = 5 * time.Second

// fireRetry sends the calls one after another: each is sent once the previous one answered or
// opts.RetryAfter passed. It returns every answer and how many calls were sent while the
// previous one was still unanswered.
func fireRetry(ctx context.Context, conn Conn, opts Options, timeout time.Duration) ([]answer, int) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := opts.RetryAfter
	if wait <= 0 {
		wait = DefaultRetryAfter
	}
	out := make([]answer, opts.Calls)
	done := make(chan struct{}, opts.Calls)
	early := 0
	for i := range out {
		if ctx.Err() != nil {
			// The timeout passed before this call's turn: it is not sent. Sending the rest
			// at once would turn the tail of a retry run into an unasked-for storm.
			out[i] = answer{err: errNotSent}
			done <- struct{}{}
			continue
		}
		answered := make(chan struct{})
		go func() {
			defer func() { done <- struct{}{} }()
			res, err := conn.CallTool(ctx, opts.Tool, opts.Args)
			out[i] = answer{res, timedOut(err, timeout)}
			close(answered)
			if opts.Answered != nil {
				opts.Answered()
			}
		}()
		if i == len(out)-1 {
			break
		}
		timer := time.NewTimer(wait)
		select {
		case <-answered:
		case <-timer.C:
			early++
		case <-ctx.Done():
		}
		timer.Stop()
	}
	for range out {
		<-done
	}
	return out, early
}
