package mcpstdio

// Inbound is the number of the child's requests being answered.
func (s *Session) Inbound() int { return s.inbound.Len() }
