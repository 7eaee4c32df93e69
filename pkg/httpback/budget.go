package httpback

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
)

// AnswerBudget bounds the bytes of large messages from servers that the process holds at once,
// across every Upstream and Session: a message longer than FreeAnswer first reserves its
// length (its Content-Length, else MaxMessage) from the budget, and keeps what it holds until
// its Call returns, or, under HoldAnswers, until the caller is done with the result. Without
// it, eight 64 MiB answers read at once took about a gigabyte (a buffer and a copy of each).
const AnswerBudget = 128 << 20

// FreeAnswer is how long a message may be without reserving any of AnswerBudget.
const FreeAnswer = 1 << 20

// answers is the process's budget; budgetWait how long a message waits for room in it before
// it is given up as too large (variables so tests can lower them).
var (
	answers    = budget.NewPool(AnswerBudget)
	budgetWait = time.Minute
)

// HoldAnswers returns a context under which a Call's answer keeps its share of AnswerBudget
// after the Call returns, until done is called (budget.Hold: the proxy core holds its back
// ends' answers that way, without knowing which back end it has).
func HoldAnswers(ctx context.Context) (_ context.Context, done func()) { return budget.Hold(ctx) }

// meter reads one message at a time from r: once a message grows past FreeAnswer it reserves
// size bytes of the budget (its Content-Length, else MaxMessage), and fails with ErrTooLarge
// when the budget has no room for it within budgetWait.
type meter struct {
	ctx  context.Context
	r    io.Reader
	size int64 // what a message reserves
	read int64 // bytes of the current message read so far
	held int64 // bytes of the budget reserved for it
}

func newMeter(ctx context.Context, r io.Reader, contentLength int64) *meter {
	size := int64(maxMessage)
	if contentLength > 0 && contentLength < size {
		size = contentLength
	}
	return &meter{ctx: ctx, r: r, size: size}
}

func (m *meter) Read(p []byte) (int, error) {
	if m.held == 0 && m.read+int64(len(p)) > FreeAnswer {
		if !answers.Acquire(m.ctx, m.size, budgetWait) {
			if err := m.ctx.Err(); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("%w: the message grew past %d bytes while the large messages held by this process filled its budget of %d MiB for %s", ErrTooLarge, FreeAnswer, answers.Total()>>20, budgetWait)
		}
		m.held = m.size
	}
	n, err := m.r.Read(p)
	m.read += int64(n)
	return n, err
}

// next starts the next message of a stream: the last one's share of the budget is given back.
func (m *meter) next() {
	answers.Release(m.held)
	m.read, m.held = 0, 0
}

// take hands the message just read over to whoever holds it next (the delivery queue): its
// share of the budget, cut to what it read, is returned for that holder to give back; the
// meter holds none of it any more.
func (m *meter) take() int64 {
	keep := min(m.held, m.read)
	answers.Release(m.held - keep)
	m.held = 0
	return keep
}

// done ends the meter with the message just read as the answer: its share of the budget is
// what it holds, kept by the caller's hold (HoldAnswers) or given back now.
func (m *meter) done() {
	keep := min(m.held, m.read)
	answers.Release(m.held - keep)
	m.held = 0
	if !answers.Keep(m.ctx, keep) {
		answers.Release(keep)
	}
}
