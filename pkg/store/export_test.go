package store

// SetTestHookFirstSweep sets testHookFirstSweep until the returned function restores it.
func SetTestHookFirstSweep(f func()) (restore func()) {
	old := testHookFirstSweep
	testHookFirstSweep = f
	return func() { testHookFirstSweep = old }
}

// WithoutDigits is withoutDigits, for tests.
var WithoutDigits = withoutDigits
