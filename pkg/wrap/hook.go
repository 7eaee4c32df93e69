package wrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/httpback"
)

// Hook is the on_unknown hook: when an intent becomes unknown in this process (a call whose
// outcome was lost, or the first refusal of an intent found unknown), wrap runs Command with
// the event's JSON on stdin, or POSTs it to URL (exactly one of the two). It never delays the
// agent's answer: events wait in a bounded queue for one worker, and an event that finds the
// queue full is dropped with a log line.
type Hook struct {
	Command []string
	URL     string
	// Retries is how many times a failed delivery (non-zero exit, no answer, a status other
	// than 2xx) is tried again, with a backoff doubling from HookBackoff; 0 means
	// DefaultHookRetries, NoHookRetries none; at most MaxHookRetries.
	Retries int
	// Timeout bounds one delivery (default DefaultHookTimeout).
	Timeout time.Duration
}

// Defaults and bounds of Hook.
const (
	DefaultHookRetries = 3
	// NoHookRetries in Hook.Retries tries a delivery once (0 is the default, 3 tries more):
	// a policy's `retries: 0`.
	NoHookRetries      = -1
	MaxHookRetries     = 10
	DefaultHookTimeout = 10 * time.Second
	HookBackoff        = 250 * time.Millisecond
	maxHookBackoff     = 10 * time.Second
	hookQueue          = 64
)

// HookEvent is what the hook receives.
type HookEvent struct {
	Event  string `json:"event"` // "unknown"
	Intent string `json:"intent"`
	Tool   string `json:"tool"`
	// Args are the arguments as the ledger keeps them: redacted fields are "[redacted]".
	Args   json.RawMessage `json:"args,omitempty"`
	State  fence.State     `json:"state,omitempty"`
	Reason string          `json:"reason"`
	// ResolveCommand is the operator's command that settles the intent; empty for a ledger
	// in wrap's memory, which no command reaches (Options.InMemory).
	ResolveCommand string    `json:"resolve_command"`
	At             time.Time `json:"at"`
}

// Check reports a hook that cannot work.
func (h *Hook) Check() error {
	if h == nil {
		return nil
	}
	switch {
	case (len(h.Command) > 0) == (h.URL != ""):
		return errors.New("on_unknown: give a command or a url, exactly one")
	case len(h.Command) > 0 && h.Command[0] == "":
		return errors.New("on_unknown: the command is empty")
	case h.Retries < NoHookRetries || h.Retries > MaxHookRetries:
		return fmt.Errorf("on_unknown: retries is %d; want 0 to %d, or NoHookRetries", h.Retries, MaxHookRetries)
	case h.Timeout < 0:
		return fmt.Errorf("on_unknown: timeout %s is negative", h.Timeout)
	}
	if h.URL != "" {
		u, err := url.Parse(h.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("on_unknown: url %s is not an http or https URL", RedactURL(h.URL))
		}
	}
	return nil
}

// RedactURL is u for a log line: its scheme and host only (httpback.ShownURL): user info,
// query and path (a Slack or Discord webhook's token) are left out.
func RedactURL(raw string) string { return httpback.ShownURL(raw) }

// hookRunner delivers hook events on one goroutine.
type hookRunner struct {
	h      Hook
	p      *Proxy
	q      chan HookEvent
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	client *http.Client

	pending atomic.Int64 // events queued or being delivered

	mu   sync.Mutex
	seen map[string]bool // intents reported by this process (bounded)
}

const maxSeen = 4096

func newHookRunner(p *Proxy, h Hook) *hookRunner {
	switch {
	case h.Retries == 0:
		h.Retries = DefaultHookRetries
	case h.Retries < 0:
		h.Retries = 0
	}
	if h.Timeout <= 0 {
		h.Timeout = DefaultHookTimeout
	}
	r := &hookRunner{h: h, p: p, q: make(chan HookEvent, hookQueue), done: make(chan struct{}), client: &http.Client{CheckRedirect: noRedirect}, seen: map[string]bool{}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	go r.loop()
	return r
}

// noRedirect keeps the hook's client from following a redirect: the event goes to the URL the
// policy names or nowhere. Followed, a 302 or 303 became a GET without the event whose 2xx
// counted as delivered, and a 307 or 308 posted the event to any Location, http included. The
// redirect is then a failed delivery (a status other than 2xx), retried and logged.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// reportUnknown queues the on_unknown event of intent. It never blocks. fresh is an outcome
// this process just lost (a call it ran), always reported: an intent cleared by the operator
// can run again and be lost again, a new outcome to check (before 2026-12-06 it was not
// reported, the intent having been reported once). Otherwise (a refusal of an intent found
// unknown) it is reported once per process.
func (p *Proxy) reportUnknown(intent, tool, reason string, token uint64, fresh bool) {
	r := p.hooks
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.seen[intent] && !fresh {
		r.mu.Unlock()
		return
	}
	if len(r.seen) >= maxSeen {
		r.seen = map[string]bool{}
	}
	r.seen[intent] = true
	r.mu.Unlock()
	ev := HookEvent{Event: "unknown", Intent: intent, Tool: tool, Reason: reason, ResolveCommand: p.clearCommand(intent, token), At: time.Now().UTC()}
	r.pending.Add(1)
	select {
	case r.q <- ev:
	default:
		r.pending.Add(-1)
		p.logf("on_unknown hook: queue full (%d events); the event of intent %s is dropped", hookQueue, intent)
	}
}

func (r *hookRunner) loop() {
	defer close(r.done)
	for {
		select {
		case ev := <-r.q:
			r.deliver(ev)
			r.pending.Add(-1)
		case <-r.ctx.Done():
			return
		}
	}
}

// close lets the queued events (and the one being delivered) go out for up to wait, then
// stops the worker, ending a delivery in progress.
func (r *hookRunner) close(wait time.Duration) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
wait:
	for r.pending.Load() > 0 {
		select {
		case <-deadline.C:
			break wait
		case <-tick.C:
		}
	}
	r.cancel()
	<-r.done
	if n := r.pending.Load(); n > 0 {
		r.p.logf("on_unknown hook: stopping with %d event(s) not delivered", n)
	}
}

func (r *hookRunner) deliver(ev HookEvent) {
	ctx, cancel := context.WithTimeout(r.ctx, r.h.Timeout)
	if rec, err := r.p.opt.Engine.Status(ctx, ev.Intent); err == nil && rec.State != fence.StateNone {
		ev.Args, ev.State = rec.Args, rec.State
		if ev.Reason == "" {
			ev.Reason = rec.Reason
		}
	}
	cancel()
	body, err := json.Marshal(ev)
	if err != nil {
		r.p.logf("on_unknown hook: %v", err)
		return
	}
	backoff := HookBackoff
	for attempt := 0; ; attempt++ {
		err := r.once(body)
		if err == nil {
			return
		}
		if attempt >= r.h.Retries || r.ctx.Err() != nil {
			r.p.logf("on_unknown hook for intent %s failed after %d attempt(s): %v", ev.Intent, attempt+1, err)
			return
		}
		r.p.logf("on_unknown hook for intent %s: attempt %d failed (%v); retrying in %s", ev.Intent, attempt+1, err, backoff)
		select {
		case <-time.After(backoff):
		case <-r.ctx.Done():
		}
		backoff = min(2*backoff, maxHookBackoff)
	}
}

// once makes one delivery.
func (r *hookRunner) once(body []byte) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.h.Timeout)
	defer cancel()
	if r.h.URL != "" {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.h.URL, bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("POST %s: %s", RedactURL(r.h.URL), "bad request")
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "effectfence-on-unknown")
		resp, err := r.client.Do(req)
		if err != nil {
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err // its text repeats the URL, secrets included
			}
			return fmt.Errorf("POST %s: %v", RedactURL(r.h.URL), err)
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("POST %s: %s", RedactURL(r.h.URL), resp.Status)
		}
		return nil
	}
	cmd := exec.CommandContext(ctx, r.h.Command[0], r.h.Command[1:]...)
	cmd.Stdin = bytes.NewReader(body)
	var stderr bytes.Buffer
	cmd.Stderr = &limited{w: &stderr, n: 2048}
	cmd.WaitDelay = time.Second
	hookGroup(cmd)
	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil && cmd.ProcessState.Success() {
		// It exited 0: delivered. What it left running (a notifier in the background) holds
		// its stderr. Before, that failed the delivery, and each retry delivered it again.
		err = nil
	}
	if err != nil {
		if r.ctx.Err() != nil {
			return fmt.Errorf("%s: stopped: wrap is exiting", r.h.Command[0])
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: no answer within %s", r.h.Command[0], r.h.Timeout)
		}
		return fmt.Errorf("%s: %v: %s", r.h.Command[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// limited keeps the first n bytes written to it.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
