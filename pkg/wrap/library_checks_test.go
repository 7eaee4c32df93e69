package wrap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// A library user who builds a Proxy with wrap.New gets the checks the command makes at its
// start: a key field cut by an ignored one (every call of the tool would have the key
// {"order": null}, so a charge for order A-2 would be answered with A-1's receipt and never
// run), an empty field path, a redact path the engine would refuse at every call, and a
// KeepResult that is neither full nor hash. Before, wrap.New took them all.
func TestNewRefusesWhatTheCommandRefuses(t *testing.T) {
	order, meta := wrap.Path{"order"}, wrap.Path{"meta"}
	for _, c := range []struct {
		name string
		opt  wrap.Options
		want string
	}{
		{"key ignored", wrap.Options{Key: map[string][]wrap.Path{"charge": {order}}, Ignore: map[string][]wrap.Path{"charge": {order}}}, `tool "charge": key field "order" is ignored`},
		{"key under an ignored parent", wrap.Options{Key: map[string][]wrap.Path{"charge": {{"meta", "order"}}}, Ignore: map[string][]wrap.Path{"charge": {meta}}}, `key field "meta.order" is ignored (ignore "meta")`},
		{"empty key path", wrap.Options{Key: map[string][]wrap.Path{"charge": {{}}}}, `tool "charge": an empty key field path`},
		{"empty ignore path", wrap.Options{Ignore: map[string][]wrap.Path{"charge": {nil}}}, `tool "charge": an empty ignored field path`},
		{"star in an ignore path", wrap.Options{Ignore: map[string][]wrap.Path{"charge": {{"items", "*", "ts"}}}}, `tool "charge": ignored field: path "items.*.ts" has a "*" segment`},
		{"star in a key path", wrap.Options{Key: map[string][]wrap.Path{"charge": {{"*"}}}}, `tool "charge": key field: path "*" has a "*" segment`},
		{"empty segment in a key path", wrap.Options{Key: map[string][]wrap.Path{"charge": {{"order", ""}}}}, `tool "charge": key field: path "order." has an empty segment`},
		{"bad redact path", wrap.Options{Redact: map[string][]string{"charge": {"card..cvv"}}}, `tool "charge": redact "card..cvv"`},
		{"bad keep result", wrap.Options{KeepResult: map[string]fence.KeepResult{"charge": "digest"}}, `tool "charge": keep result "digest"`},
		// A window written as seconds (600 meant as ten minutes) is 600 ns: no retry would
		// ever be answered with the recorded result, every one would run again.
		{"replay window in nanoseconds", wrap.Options{ReplayWindow: 600}, `replay window 600ns is out of range; want 0 (the default, 10m0s) or from 1s to 8784h0m0s`},
		{"negative replay window", wrap.Options{ReplayWindow: -time.Minute}, `replay window -1m0s is out of range`},
		{"tool's replay window in nanoseconds", wrap.Options{ReplayWindows: map[string]time.Duration{"charge": 600}}, `tool "charge": replay window 600ns is out of range`},
		{"replay window past a year", wrap.Options{ReplayWindows: map[string]time.Duration{"charge": 400 * 24 * time.Hour}}, `tool "charge": replay window 9600h0m0s is out of range`},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := c.opt
			opt.Command, opt.Engine, opt.Log = []string{"true"}, fence.New(fence.NewMemoryStore(), fence.Config{}), io.Discard
			p, err := wrap.New(opt)
			if err == nil {
				p.Stop("test over")
				t.Fatalf("wrap.New took the options; want an error with %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("wrap.New: %v\nwant it to say %q", err, c.want)
			}
		})
	}
	// Settings a policy would make, but kept apart, are taken.
	opt := wrap.Options{Command: []string{"true"}, Engine: fence.New(fence.NewMemoryStore(), fence.Config{}), Log: io.Discard,
		Key: map[string][]wrap.Path{"charge": {{"order", "id"}}}, Ignore: map[string][]wrap.Path{"charge": {{"order", "ts"}}, "refund": {order}},
		Redact: map[string][]string{"charge": {"card.number", "items.*.cvv"}}, KeepResult: map[string]fence.KeepResult{"charge": fence.KeepHash, "refund": ""},
		ReplayWindow: wrap.MinReplayWindow, ReplayWindows: map[string]time.Duration{"charge": wrap.MaxReplayWindow, "refund": 0}}
	p, err := wrap.New(opt)
	if err != nil {
		t.Fatalf("wrap.New refused settings that are fine: %v", err)
	}
	p.Stop("test over")
}

// Options.PerTool is a function: wrap.New cannot see what it will say of a tool the server
// lists later. A call whose settings cut a key field by an ignored one is refused, not run
// and never answered with another call's receipt. Before, the second charge (another order)
// was answered with the first one's receipt.
func TestPerToolKeyFieldThatIsIgnoredIsRefusedAtTheCall(t *testing.T) {
	r := newRig(t)
	x, _ := r.inproc(wrap.Options{PerTool: func(tool string) wrap.ToolSettings {
		if tool != "charge" {
			return wrap.ToolSettings{}
		}
		return wrap.ToolSettings{Key: []wrap.Path{{"order"}}, Ignore: []wrap.Path{{"order"}}}
	}}, initNoElicit, nil)
	raw := func(args string) string {
		t.Helper()
		x.nextID++
		fmt.Fprintf(x.in, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge","arguments":%s}}`+"\n", x.nextID, args)
		for line := range x.lines {
			var m struct {
				ID int `json:"id"`
			}
			if json.Unmarshal(line, &m) == nil && m.ID == x.nextID {
				return string(line)
			}
		}
		t.Fatalf("the proxy stopped; log:\n%s", x.log.String())
		return ""
	}
	first := raw(`{"amount":500,"order":"A-1"}`)
	second := raw(`{"amount":500,"order":"A-2"}`)
	if strings.Contains(second, `"effectfence/replayed":true`) {
		t.Fatalf("a charge for order A-2 was answered with A-1's receipt: %s", second)
	}
	for _, a := range []string{first, second} {
		if !strings.Contains(a, `key field \"order\" is ignored`) || !strings.Contains(a, "NOT executed") {
			t.Errorf("the call was not refused for its settings: %s", a)
		}
	}
	if n := r.effectCount(); n != 0 {
		t.Errorf("%d charges ran, want none: the settings are refused", n)
	}
}

// A replay window PerTool gives out of range (600 ns, meant as seconds) refuses the tool's
// calls, as wrap.New refuses it in Options: before, a retry of a charge ran it again.
func TestPerToolReplayWindowOutOfRangeIsRefusedAtTheCall(t *testing.T) {
	r := newRig(t)
	x, _ := r.inproc(wrap.Options{PerTool: func(string) wrap.ToolSettings { return wrap.ToolSettings{ReplayWindow: 600} }}, initNoElicit, nil)
	for range 2 {
		x.nextID++
		fmt.Fprintf(x.in, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge","arguments":{"amount":500}}}`+"\n", x.nextID)
		for line := range x.lines {
			var m struct {
				ID int `json:"id"`
			}
			if json.Unmarshal(line, &m) != nil || m.ID != x.nextID {
				continue
			}
			if !strings.Contains(string(line), "replay window 600ns is out of range") {
				t.Errorf("the call was not refused for its replay window: %s", line)
			}
			break
		}
	}
	if n := r.effectCount(); n != 0 {
		t.Errorf("%d charges ran, want none: the settings are refused", n)
	}
}

// Attach must come before Dispatch (the Proxy's doc says so). A front that forgets it gets a
// clear line in the log and nothing runs: before, the first answer was a nil interface call
// on a goroutine of the proxy's, which ended the whole program, after the call had run.
func TestDispatchBeforeAttachRunsNothing(t *testing.T) {
	r := newRig(t)
	led := r.openLedger()
	log := &logBuf{}
	p, err := wrap.New(wrap.Options{Command: r.childCmd(), Env: r.env(), Engine: led.Engine, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop("test over")
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":` + initNoElicit + `}`))
	p.Dispatch([]byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1}}}`))
	waitFor(t, "the log to say why", func() bool { return strings.Contains(log.String(), "Attach") })
	if n := r.effectCount(); n != 0 {
		t.Fatalf("%d charges ran with nobody to answer", n)
	}
}

// Serve without an input or an output is refused with an error, and nothing starts. Before, a
// nil reader was read on a goroutine of the proxy's, and the nil dereference ended the whole
// program.
func TestServeWithoutStreamsIsRefused(t *testing.T) {
	for name, streams := range map[string]struct {
		in  io.Reader
		out io.Writer
	}{"no input": {nil, io.Discard}, "no output": {strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\n"), nil}} {
		p, err := wrap.New(wrap.Options{Command: []string{"true"}, Engine: fence.New(fence.NewMemoryStore(), fence.Config{}), Log: io.Discard})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Serve(context.Background(), streams.in, streams.out); err == nil || !strings.Contains(err.Error(), "input and an output") {
			t.Errorf("%s: Serve = %v; want an error naming the missing stream", name, err)
		}
	}
}
