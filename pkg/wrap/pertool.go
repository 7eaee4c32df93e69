package wrap

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// ToolSettings are the settings of one tool's calls, as Options.PerTool returns them.
type ToolSettings struct {
	// Fence and Pass force the tool in or out of the fence (Pass wins); with neither, its
	// readOnlyHint and Options.FenceReads decide.
	Fence, Pass bool
	// Key names the identity fields; Ignore leaves fields out of the identity.
	Key, Ignore []Path
	// RerunSafe records the tool's claims re-run safe (see Options.RerunSafe).
	RerunSafe bool
	// Redact and KeepResult are what the ledger stores (see Options.Redact).
	Redact     []string
	KeepResult fence.KeepResult
	// ReplayWindow is how long a recorded result answers an identical call; 0 means
	// Options.ReplayWindow.
	ReplayWindow time.Duration
	// Wait bounds how long a duplicate waits for the attempt in flight; 0 means Options.Wait.
	Wait time.Duration
	// NoElicit forbids asking a person (MCP elicitation) about an unknown outcome of the tool.
	NoElicit bool
	// Given names the settings above given for this tool itself (a policy entry's keys, a
	// per-tool flag), not those every tool gets: if the tool passes through by its
	// readOnlyHint they have no effect, and wrap says so (Proxy.fenced).
	Given []string
}

// GivenFlags names the per-tool flags of opt that set something of tool that has no effect
// when the tool passes through (see ToolSettings.Given): --redact is not one of them, since
// the values it names are kept out of the server's stderr that wrap records either way.
func GivenFlags(opt Options, tool string) []string {
	var given []string
	add := func(set bool, flag string) {
		if set {
			given = append(given, flag)
		}
	}
	_, key := opt.Key[tool]
	_, ignore := opt.Ignore[tool]
	_, keep := opt.KeepResult[tool]
	_, window := opt.ReplayWindows[tool]
	add(key, "--key")
	add(ignore, "--ignore-field")
	add(slices.Contains(opt.RerunSafe, tool), "--rerun-safe")
	add(keep, "--keep-result")
	add(window, "--replay-window")
	return given
}

// settings returns the settings of tool's calls: Options.PerTool's when set, else those of
// the per-tool options; ReplayWindow and Wait are always filled in.
func (p *Proxy) settings(tool string) ToolSettings {
	var s ToolSettings
	if p.opt.PerTool != nil {
		s = p.opt.PerTool(tool)
	} else {
		s = ToolSettings{
			Fence: p.fence[tool], Pass: p.pass[tool], Key: p.opt.Key[tool], Ignore: p.opt.Ignore[tool],
			RerunSafe: p.rerun[tool], Redact: p.opt.Redact[tool], KeepResult: p.opt.KeepResult[tool],
			ReplayWindow: p.opt.ReplayWindows[tool], NoElicit: p.opt.NoElicit[tool],
		}
		// Given is left empty here: only fenced needs it, for a tool that passes through
		// by its readOnlyHint, and every call asks for its settings.
	}
	if s.ReplayWindow <= 0 {
		s.ReplayWindow = p.opt.ReplayWindow
	}
	if s.ReplayWindow <= 0 {
		s.ReplayWindow = DefaultReplayWindow
	}
	if s.Wait <= 0 {
		s.Wait = p.opt.Wait
	}
	return s
}

// check refuses settings that would fence calls wrongly (checkCall) and privacy settings the
// engine would refuse at every call.
func (s ToolSettings) check() error {
	if err := s.checkCall(); err != nil {
		return err
	}
	for _, r := range s.Redact {
		var bad fence.InvalidError
		if err := fence.CheckRedactPath(r); errors.As(err, &bad) {
			return fmt.Errorf("redact %q: %s", r, bad.Why)
		}
	}
	if _, err := fence.ParseKeepResult(string(s.KeepResult)); err != nil {
		return fmt.Errorf("keep result %q: want full or hash", s.KeepResult)
	}
	return nil
}

// checkCall refuses a key field cut by an ignored one (every call would have the same key,
// and distinct calls would be answered as one), an ignored field that cuts RepeatArg
// (IgnoredRepeat), an empty field path (it names no field), a
// path ParsePath refuses (an empty or "*" segment) and a replay window out of range.
func (s ToolSettings) checkCall() error {
	if err := checkWindow(s.ReplayWindow); err != nil {
		return err
	}
	for _, k := range s.Key {
		if len(k) == 0 {
			return errors.New("an empty key field path: it names no field")
		}
		if err := k.check(); err != nil {
			return fmt.Errorf("key field: %v", err)
		}
	}
	for _, i := range s.Ignore {
		if len(i) == 0 {
			return errors.New("an empty ignored field path: it names no field")
		}
		if err := i.check(); err != nil {
			return fmt.Errorf("ignored field: %v", err)
		}
		if err := IgnoredRepeat(i); err != nil {
			return err
		}
	}
	if k, i, cut := IgnoredKey(s.Key, s.Ignore); cut {
		return IgnoredKeyError(k, i)
	}
	return nil
}

// checkWindow refuses a replay window other than 0 (the default) that is out of range.
func checkWindow(w time.Duration) error {
	if w != 0 && (w < MinReplayWindow || w > MaxReplayWindow) {
		return fmt.Errorf("replay window %s is out of range; want 0 (the default, %s) or from %s to %s", w, DefaultReplayWindow, MinReplayWindow, MaxReplayWindow)
	}
	return nil
}
