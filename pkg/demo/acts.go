package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fatih/color"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"

	"github.com/effectfence/effectfence/pkg/probe"
)

// Calls is the number of racing agents in each act.
const Calls = 12

// chargeArgs is what every agent sends, byte for byte.
const chargeArgs = `{"amount":4900}`

// Spawn starts an MCP stdio child (argv[0] is the program) with extra environment entries and
// connects to it.
type Spawn func(ctx context.Context, argv, env []string) (probe.Conn, error)

// Options configure a demo run.
type Options struct {
	Self   string // the effectfence binary: it is both the raw server and the fence
	Dir    string // scratch directory for the effects files (the caller removes it)
	Spawn  Spawn
	Colour bool // colour the verdicts; only when the output is a terminal and NO_COLOR is unset
}

// Act is what one act measured.
type Act struct {
	Title      string
	Report     *probe.Report
	Executions int      // lines in the server's effects file: measured, not inferred
	ChargeIDs  []string // the distinct charge ids in the answers, sorted
}

// Result is both acts.
type Result struct{ Raw, Fenced Act }

// fenceEnv is Act 2's wrap's environment over the user's: a throwaway in-memory ledger, and
// none of the user's own fence settings (a policy file for their server, a lease, a result
// TTL), which wrap would otherwise read from the shell the demo was started in, so that the
// demo shows the defaults and prints the same story everywhere. Empty means unset to wrap.
var fenceEnv = []string{"EFFECTFENCE_LEDGER=memory", "EFFECTFENCE_POLICY=", "EFFECTFENCE_LEASE_SECS=",
	"EFFECTFENCE_RESULT_TTL_SECS=", "EFFECTFENCE_ON_LEASE_EXPIRY="}

// Run plays both acts and writes the story to w. It fails if the fence did not hold (Act 2
// executed other than exactly once) or the raw server did not double-fire, so the demo can
// never print a success it did not measure.
func Run(ctx context.Context, w io.Writer, opts Options) (*Result, error) {
	if opts.Self == "" || opts.Dir == "" || opts.Spawn == nil {
		return nil, errors.New("demo: Self, Dir and Spawn are required")
	}
	rawFile := filepath.Join(opts.Dir, "raw.effects")
	fencedFile := filepath.Join(opts.Dir, "fenced.effects")
	server := func(effects string) []string {
		return []string{opts.Self, "demo-server", "--effects", effects}
	}
	raw, err := play(ctx, opts, "Act 1: no fence", rawFile, server(rawFile), nil)
	if err != nil {
		return nil, fmt.Errorf("act 1: %w", err)
	}
	// The fence runs with a throwaway in-memory ledger, so every demo starts from nothing and
	// prints the same story.
	wrapped := append([]string{opts.Self, "wrap", "--"}, server(fencedFile)...)
	fenced, err := play(ctx, opts, "Act 2: behind effectfence wrap", fencedFile, wrapped, fenceEnv)
	if err != nil {
		return nil, fmt.Errorf("act 2: %w", err)
	}
	res := &Result{Raw: *raw, Fenced: *fenced}
	if err := res.write(w, opts.Colour); err != nil {
		return nil, err
	}
	switch {
	case raw.Executions < 2:
		return res, fmt.Errorf("demo: the raw server executed %d time(s); it should have double-fired", raw.Executions)
	case fenced.Executions != 1:
		return res, fmt.Errorf("demo: behind the fence the server executed %d times, not once", fenced.Executions)
	case fenced.Report.Succeeded != Calls:
		return res, fmt.Errorf("demo: behind the fence %d of %d calls got a clean answer", fenced.Report.Succeeded, Calls)
	}
	return res, nil
}

// effectsWitness counts the demo server's effects file.
type effectsWitness string

func (e effectsWitness) Measure(context.Context) (int64, error) {
	n, err := CountEffects(string(e))
	return int64(n), err
}

func (e effectsWitness) String() string { return "lines in " + filepath.Base(string(e)) }

func play(ctx context.Context, opts Options, title, effects string, argv, env []string) (*Act, error) {
	// The file exists before the server starts so the first reading is a real zero.
	if err := os.WriteFile(effects, nil, 0o600); err != nil {
		return nil, err
	}
	rep, err := probe.Run(ctx, probe.Options{
		Tool:    ToolCharge,
		Args:    json.RawMessage(chargeArgs),
		Calls:   Calls,
		Witness: effectsWitness(effects),
		// One line per execution of the demo server: it counts runs, not state.
		WitnessKind: probe.Executions,
	}, func(ctx context.Context) (probe.Conn, error) { return opts.Spawn(ctx, argv, env) })
	if err != nil {
		return nil, err
	}
	n, err := CountEffects(effects)
	if err != nil {
		return nil, err
	}
	return &Act{Title: title, Report: rep, Executions: n, ChargeIDs: chargeIDs(rep)}, nil
}

// chargeIDs pulls the charge ids out of the answer previews ("charged $49.00: ch_demo_0001").
func chargeIDs(rep *probe.Report) []string {
	var ids []string
	for _, a := range rep.Answers {
		if a.IsError {
			continue
		}
		if i := strings.LastIndex(a.Preview, "ch_demo_"); i >= 0 {
			ids = append(ids, a.Preview[i:])
		}
	}
	sort.Strings(ids)
	return ids
}

func dollars(cents int) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }

func (res *Result) write(w io.Writer, colour bool) error {
	bad, good, dim := color.New(color.FgRed, color.Bold), color.New(color.FgGreen, color.Bold), color.New(color.Faint)
	for _, c := range []*color.Color{bad, good, dim} {
		if colour {
			c.EnableColor()
		} else {
			c.DisableColor()
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "effectfence demo: %d agents send the same charge_card %s at the same instant.\n", Calls, chargeArgs)
	fmt.Fprintf(&b, "%s\n\n", dim.Sprint("Nothing real is charged: the MCP server is this binary (effectfence demo-server), and it writes down every execution."))

	raw, fenced := res.Raw, res.Fenced
	fmt.Fprintf(&b, "%s — %d identical calls straight to the server\n", raw.Title, Calls)
	fmt.Fprintf(&b, "  answers:    %d clean, %d distinct charges\n", raw.Report.Succeeded, len(raw.ChargeIDs))
	for i := 0; i < len(raw.ChargeIDs); i += 6 {
		fmt.Fprintf(&b, "              %s\n", strings.Join(raw.ChargeIDs[i:min(i+6, len(raw.ChargeIDs))], "  "))
	}
	fmt.Fprintf(&b, "  executions: %d, counted by the server's own effects file\n", raw.Executions)
	fmt.Fprintf(&b, "  %s the customer paid %s for one %s order\n\n", bad.Sprint(raw.Report.Headline+":"), dollars(4900*raw.Executions), dollars(4900))

	fmt.Fprintf(&b, "%s — the same %d calls, the same server, through the fence\n", fenced.Title, Calls)
	// Every line of Act 2 says what was measured: the success is printed only when it is the
	// one Run returns no error for.
	if len(fenced.ChargeIDs) == 1 {
		fmt.Fprintf(&b, "  answers:    %d clean, all the same charge: %s\n", fenced.Report.Succeeded, fenced.ChargeIDs[0])
	} else {
		fmt.Fprintf(&b, "  answers:    %d clean, %d distinct charges\n", fenced.Report.Succeeded, len(fenced.ChargeIDs))
	}
	fmt.Fprintf(&b, "  executions: %d, counted by the server's own effects file\n", fenced.Executions)
	if fenced.Executions == 1 && fenced.Report.Succeeded == Calls {
		fmt.Fprintf(&b, "  %s %d duplicate charges never reached the server (%s not charged)\n\n",
			good.Sprint("EXACTLY ONCE:"), Calls-fenced.Executions, dollars(4900*(Calls-fenced.Executions)))
	} else {
		fmt.Fprintf(&b, "  %s %d execution(s) and %d clean answer(s) of %d calls, where the fence gives 1 and %d\n\n",
			bad.Sprint("NOT EXACTLY ONCE:"), fenced.Executions, fenced.Report.Succeeded, Calls, Calls)
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}

	t := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off))
	t.Header("", "calls", "clean answers", "distinct charges", "executions (measured)")
	for _, a := range []Act{raw, fenced} {
		if err := t.Append(a.Title, Calls, a.Report.Succeeded, len(a.ChargeIDs), a.Executions); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, `
Try it on your own MCP server:
  1. see the problem:  effectfence probe --tool <tool> --args '<json object>' --calls 12 -- <your server command>
  2. put up the fence: effectfence wrap -- <your server command>     (as the command in your MCP client config)
  3. see it hold:      effectfence probe --tool <tool> --args '<json object>' --calls 12 -- effectfence wrap -- <your server command>
`)
	return err
}
