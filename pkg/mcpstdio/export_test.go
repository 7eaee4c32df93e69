package mcpstdio

// Inbound is the number of the child's requests being answered.
func (s *Session) Inbound() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inbound)
}
