package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v3"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/demo"
	"github.com/effectfence/effectfence/pkg/probe"
)

func demoCommand(s streams) *cli.Command {
	return &cli.Command{
		Name:  "demo",
		Usage: "twelve racing agents against a raw server, then behind the fence (nothing real fires)",
		Description: `Act 1 sends 12 identical concurrent charge_card {"amount":4900} calls to a built-in raw MCP
server (this binary, as a child process): 12 executions, 12 distinct charges. Act 2 sends the
same 12 through "effectfence wrap" with a throwaway in-memory ledger: 12 clean answers, 1
execution. Executions are counted by the demo server's own effects file. Exits 1 if either act
did not show what it should.`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "verbose", Usage: "show the servers' stderr"},
			&cli.BoolFlag{Name: "json", Usage: "print what each act measured as one JSON object instead of the story"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			res, err := runDemo(ctx, cmd, s)
			if !cmd.Bool("json") {
				return err
			}
			// A script always has one JSON object to read: a run that could not play either
			// act too (before, it printed nothing on stdout then).
			if jerr := writeDemoJSON(s.out, res, err); jerr != nil {
				return jerr
			}
			return err
		},
	}
}

// runDemo plays both acts, telling the story on s.out unless --json. res is nil when the run
// ended before it had both acts' measures.
func runDemo(ctx context.Context, cmd *cli.Command, s streams) (*demo.Result, error) {
	if cmd.Args().Len() > 0 {
		return nil, usageErr("demo takes no arguments, got %q", cmd.Args().First())
	}
	ctx, stopper, stop := stopChildOnSignals(ctx)
	defer stop()
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("demo: cannot find this binary to run it as the demo server: %w", err)
	}
	dir, err := os.MkdirTemp("", "effectfence-demo-")
	if err != nil {
		return nil, fmt.Errorf("demo: cannot make a scratch folder for the demo server's effects files in %s (TMPDIR): %w", os.TempDir(), err)
	}
	defer os.RemoveAll(dir)
	var childErr io.Writer = io.Discard
	if cmd.Bool("verbose") {
		childErr = safetext.NewWriter(s.err)
	}
	story := s.out
	if cmd.Bool("json") {
		story = io.Discard
	}
	res, err := demo.Run(ctx, story, demo.Options{
		Self: self, Dir: dir, Colour: !cmd.Bool("json") && colourFor(s.out),
		Spawn: func(ctx context.Context, argv, env []string) (probe.Conn, error) {
			return probe.Spawn(ctx, argv, env, childErr)
		},
	})
	if serr := stopper.stopped("the demo's servers were shut down"); serr != nil {
		return res, serr
	}
	return res, err
}

// writeDemoJSON is `demo --json`: what each act measured, and ok when both showed what they
// should (the raw server double-fired; behind the fence one execution, every call answered
// cleanly); err is the run's verdict. A run that ended before it had both acts' measures (res
// nil) gives no acts, ok false and its error.
func writeDemoJSON(w io.Writer, res *demo.Result, err error) error {
	type act struct {
		Title           string   `json:"title"`
		Calls           int      `json:"calls"`
		CleanAnswers    int      `json:"clean_answers"`
		DistinctCharges int      `json:"distinct_charges"`
		Executions      int      `json:"executions"`
		ChargeIDs       []string `json:"charge_ids"`
	}
	of := func(a demo.Act) act {
		x := act{Title: a.Title, Executions: a.Executions, DistinctCharges: len(a.ChargeIDs), ChargeIDs: a.ChargeIDs}
		if a.Report != nil {
			x.Calls, x.CleanAnswers = a.Report.Calls, a.Report.Succeeded
		}
		if x.ChargeIDs == nil {
			x.ChargeIDs = []string{}
		}
		return x
	}
	out := struct {
		Acts  []act  `json:"acts"`
		OK    bool   `json:"ok"`
		Error string `json:"error,omitempty"`
	}{Acts: []act{}, OK: err == nil && res != nil}
	if res != nil {
		out.Acts = []act{of(res.Raw), of(res.Fenced)}
	}
	if err != nil {
		out.Error = err.Error()
	}
	b, merr := json.Marshal(out)
	if merr != nil {
		return merr
	}
	_, werr := fmt.Fprintf(w, "%s\n", b)
	return werr
}
