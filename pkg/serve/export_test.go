package serve

// SetMaxMessage lowers the bound on one client message for a test; it returns a func that
// puts it back.
func SetMaxMessage(n int) func() {
	old := maxMessage
	maxMessage = n
	return func() { maxMessage = old }
}
