package mcpstdio

import (
	"time"

	"github.com/effectfence/effectfence/pkg/internal/budget"
)

// Inbound is the number of the child's requests being answered.
func (s *Session) Inbound() int { return s.inbound.Len() }

// SetAnswerBudget replaces the process's AnswerBudget by a pool of total bytes and the wait
// for room in it by wait, for a test; it returns the pool and a func that puts both back.
func SetAnswerBudget(total int64, wait time.Duration) (*budget.Pool, func()) {
	oldPool, oldWait := answers, budgetWait
	answers, budgetWait = budget.NewPool(total), wait
	return answers, func() { answers, budgetWait = oldPool, oldWait }
}

// Pending is the number of calls waiting for a response that has not been read.
func (s *Session) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}
