package wrap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// A claim names the server process its call is sent to (fence.Request.Carrier): a wrap killed
// with SIGKILL takes its child with it, but not what the child started (the node under npx),
// which may still run the call; the ledger judges the claim's holder alive while that process
// group runs (pkg/fence/carrier.go). The carrier is the group of the live session when the
// call is admitted; a call that goes to another (the server restarted in between) has its
// claim renewed with the new group before it is sent (carry).

// grouped is a connection whose server leads a process group of its own (a stdio child).
type grouped interface{ Group() int }

// carried caches the carrier of the last session asked about.
type carried struct {
	mu   sync.Mutex
	conn Conn
	text string
}

// carrier returns the carrier naming the process group of c's server, "" when it has none
// this process can name (a remote server, no /proc, no session).
func (p *Proxy) carrier(c Conn) string {
	g, ok := c.(grouped)
	if !ok {
		return ""
	}
	p.carried.mu.Lock()
	defer p.carried.mu.Unlock()
	if p.carried.conn != c {
		p.carried.conn, p.carried.text = c, fence.GroupCarrier(g.Group())
	}
	return p.carried.text
}

// carry makes the claim of t, admitted naming carrier named, name the carrier of s, the
// session its call is about to be sent to: when they differ, the claim is renewed with s's
// (Engine.Carry) before the call goes, so it never runs where the ledger does not look. A
// claim lost meanwhile is not sent; when the ledger does not answer in time, the call goes,
// its claim naming the old carrier until a renewal of hb, the call's heartbeat, records the
// new one (each renewal tries until one has). Before, none did: for the whole call the claim
// named a group that had ended, and a wrap killed meanwhile had its re-run-safe claim taken
// over at once while the new server still ran the call (TestCarrierRecordedAfterASlowLedger).
func (p *Proxy) carry(ctx context.Context, t fence.Ticket, named string, s Conn, hb *beats) (fence.Ticket, error) {
	c := p.carrier(s)
	if c == "" || c == named {
		return t, nil
	}
	hctx, cancel := context.WithTimeout(ctx, p.opt.Engine.Config().LeaseTTL/3)
	next, err := p.opt.Engine.Carry(hctx, t, c)
	cancel()
	switch {
	case err == nil:
		return next, nil
	case errors.Is(err, fence.ErrLeaseLost):
		return t, fmt.Errorf("%w: its claim was lost before it was sent (%v)", mcpstdio.ErrNotSent, err)
	}
	p.logf("intent %s: its call goes to a new server process, and the ledger did not record that in time (%v); sent all the same, the next lease renewals record it", t.Intent, err)
	hb.later(c)
	return t, nil
}

// ending is a connection to a server process that can outlive its session (a stdio child):
// one that closed its stdout is stopped at once, and one wrap stops gets the end of its stdin,
// then SIGTERM, then SIGKILL, each after a wait.
type ending interface {
	Done() <-chan struct{}
	Exited() <-chan struct{}
}

// serverExitWait bounds awaitExit: mcpstdio stops a session's process within 4 s of its end
// (Close's two waits), plus the 2 s it gives the process's output after it exited.
const serverExitWait = 15 * time.Second

// awaitExit waits, when the session of s has ended, until its server process has exited too.
// A call whose session ended under it is recorded as unknown only after that, its claim's
// heartbeat running meanwhile: until the process exits it may still run the call, and an
// unknown claim whose holder and server both run is judged by its holder alone
// (fence.CarrierRuns takes a running group leader for the live server), so an operator's
// clear would have freed the intent while the call still ran. Once the process has exited,
// what it started is judged as the carrier (a group running without its leader).
func (p *Proxy) awaitExit(s Conn) {
	e, ok := s.(ending)
	if !ok {
		return
	}
	select {
	case <-e.Done():
	default:
		return // the session is live: the call's answer came from it
	}
	select {
	case <-e.Exited():
	case <-time.After(serverExitWait):
		p.logf("the MCP server's session ended, and its process still runs %s later; the calls it held are recorded as unknown now", serverExitWait)
	}
}
