package store

import "time"

// Intervals are how often l's background goroutine sweeps expired outcomes and recovers
// claims.
func (l *Ledger) Intervals() (sweep, recover time.Duration) { return l.every, l.recoverEvery }

// SetTestHookFirstSweep sets testHookFirstSweep until the returned function restores it.
func SetTestHookFirstSweep(f func()) (restore func()) {
	old := testHookFirstSweep
	testHookFirstSweep = f
	return func() { testHookFirstSweep = old }
}

// WithoutDigits is withoutDigits, for tests.
var WithoutDigits = withoutDigits

// Background is closed once l's background sweep and recovery have stopped.
func (l *Ledger) Background() <-chan struct{} { return l.swept }
