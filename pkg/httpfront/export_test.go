package httpfront

// SetMaxBacklog lowers the bound on one stream's backlog for a test; it returns a func that
// puts it back.
func SetMaxBacklog(n int) func() {
	old := maxBacklog
	maxBacklog = n
	return func() { maxBacklog = old }
}

// Backlog is the number of bytes queued, over every session, for open streams whose client
// has not read them yet.
func (h *Handler) Backlog() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, s := range h.sessions {
		s.mu.Lock()
		sts := make([]*stream, 0, len(s.requests)+1)
		for _, st := range s.requests {
			sts = append(sts, st)
		}
		if s.getSt != nil {
			sts = append(sts, s.getSt)
		}
		s.mu.Unlock()
		for _, st := range sts {
			st.mu.Lock()
			for _, l := range st.queue {
				n += len(l)
			}
			st.mu.Unlock()
		}
	}
	return n
}
