package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// stopSignals are the signals that stop serve and wrap: the first asks for an orderly stop, the
// second for an exit at once. SIGHUP (the agent's terminal closed: the kernel tells its
// session's foreground group, MCP servers included) would otherwise kill the process mid-call,
// with forwarded calls unrecorded; it is left alone when the process was started with it
// ignored (nohup), since asking for it would undo that.
func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// stopOnSignals returns a context that the first stop signal cancels (first is called with it,
// to log what the stop waits for); on the second, now is called (to log and kill what must
// not outlive us) and the process exits at once with 128 + the signal's number. The returned
// function stops listening; once the second signal has arrived it never returns, so the exit
// code is the signal's even when now's kill lets the command finish first (it returned 0 then).
func stopOnSignals(ctx context.Context, first, now func(os.Signal)) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, stopSignals()...)
	done := make(chan struct{})
	var exiting sync.Mutex // held from the second signal to the exit; taken by stop
	stopped := false       // stop ran (guarded by exiting)
	go func() {
		n := 0
		for {
			select {
			case sig := <-sigs:
				n++
				if n == 1 {
					first(sig)
					cancel()
					continue
				}
				exiting.Lock()
				if stopped { // the command ended before this signal: its exit stands
					exiting.Unlock()
					return
				}
				now(sig)
				code := exitError
				if s, ok := sig.(syscall.Signal); ok {
					code = 128 + int(s)
				}
				os.Exit(code)
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		exiting.Lock()
		stopped = true
		exiting.Unlock()
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// childStopper is for the commands that run an MCP server as a child for a while (probe,
// demo, scan --run). The child has its own process group, so a terminal's Ctrl-C does not
// reach it; a command that simply died of the signal left what the child had started (the
// node that npx or a shell runs) going, with calls possibly still running in it. The first
// stop signal cancels the context instead, so the command shuts the child's process group
// down on its usual way out; a second one exits at once.
type childStopper struct {
	mu  sync.Mutex
	sig os.Signal
}

func stopChildOnSignals(ctx context.Context) (context.Context, *childStopper, func()) {
	cs := &childStopper{}
	ctx, stop := stopOnSignals(ctx, func(sig os.Signal) {
		cs.mu.Lock()
		cs.sig = sig
		cs.mu.Unlock()
	}, func(os.Signal) {})
	return ctx, cs, stop
}

// stopped returns the error to report when a stop signal ended the command, else nil.
func (cs *childStopper) stopped(what string) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.sig == nil {
		return nil
	}
	code := exitError
	if s, ok := cs.sig.(syscall.Signal); ok {
		code = 128 + int(s)
	}
	return exitCoder{code, fmt.Errorf("stopped by %v: %s", cs.sig, what)}
}
