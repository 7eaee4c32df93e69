package wrap

import (
	"strings"
	"sync"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
)

// runningAtAnswerSink is an agent that notes, as each answer reaches it, what the proxy
// still counts as running: what Stop would log if the agent closed its input right then.
type runningAtAnswerSink struct {
	p       *Proxy
	mu      sync.Mutex
	running map[string][]string // answer's id (as logged) → the proxy's in-flight list then
	all     chan struct{}
	want    int
}

func (s *runningAtAnswerSink) Write(line []byte) error {
	m, err := jsonrpc.Parse(line)
	if err != nil || len(m.ID) == 0 || m.Method != "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[jsonrpc.LogID(m.ID)] = s.p.inFlight()
	if len(s.running) == s.want {
		close(s.all)
	}
	return nil
}

// TestAnsweredRequestIsNotListedAsRunning: once the agent has a request's answer, wrap no
// longer counts that request as running. An agent that closes its input as soon as it has
// its last answer (a client shutting down, a script) saw wrap log "stopping (the agent
// closed its input): waiting up to 2s for 2 calls: tools/call … (request id 1, running
// 100ms); …" for calls it had already answered, whenever the closing came before the
// goroutine that wrote the answer had cleaned up (2 of 3 sessions of a real wrap of
// server-memory driven by a script; and of a command that could not start, its answered
// initialize). The list was taken after the answer was written.
func TestAnsweredRequestIsNotListedAsRunning(t *testing.T) {
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	p, err := New(Options{Backend: func(BackendConfig) Backend { return nopBack{} }, Engine: eng, Log: &strings.Builder{}, Scope: "s"})
	if err != nil {
		t.Fatal(err)
	}
	sink := &runningAtAnswerSink{p: p, running: map[string][]string{}, all: make(chan struct{}), want: 3}
	p.Attach(sink)
	p.child, p.initDone = nopBack{}, true
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"ping","method":"ping"}`))
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"fenced","method":"tools/call","params":{"name":"echo","arguments":{"a":1}}}`))
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":"list","method":"tools/list"}`))
	<-sink.all
	p.Stop("test")
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for id, running := range sink.running {
		for _, r := range running {
			if strings.Contains(r, "(request id "+id+",") {
				t.Errorf("when its answer reached the agent, request %s was still listed as running: %q", id, running)
			}
		}
	}
}
