package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v3"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/probe"
)

// exitDoubleFire is probe's exit code when a double-fire was proven (documented in
// docs/README-probedemo.md): 0 means none was proven, 1 the probe could not run, 2 bad input.
const exitDoubleFire = 3

func probeCommand(io streams) *cli.Command {
	return &cli.Command{
		Name:      "probe",
		Metadata:  map[string]any{jsonErrors: true},
		Usage:     "fire N byte-identical calls at an MCP server (at once, or as retries) and report what they prove",
		ArgsUsage: "-- <server command...>",
		Description: `Starts the server, calls only --tool with exactly --args, --calls times over one connection,
and counts distinct answers (content + structuredContent + isError; _meta ignored).

--pattern storm (default) sends every call at the same instant. --pattern retry sends one, waits
for its answer or --retry-after, then sends the same call again: an agent retrying after a timeout.

Verdicts: PROVEN DOUBLE-FIRE (different answers, or an executions witness counted more than one
run), EXACTLY ONCE (an executions witness counted one run), no race surface observed (one call
succeeded, the server refused the rest), INCONCLUSIVE from responses (equal answers cannot tell
once from many).

--witness runs a shell command before and after that prints a number. Say what it counts with
--witness-kind: "executions" if it rises by one each time the tool runs (an append-only log of
runs: 'wc -l < charges.log'), "state" (the default) if it reads the resulting state (rows,
entities, a file's size). A state reading is reported beside the answers but never proves once:
executions can collapse into one state. A witness that exits non-zero but prints only a number
(grep -c with no match) is read.

--json prints the report, or, if the probe cannot run, {"error":{"code","message","exit"}}.

Exit codes: 0 no double-fire proven, 1 the probe could not run, 2 bad arguments (nothing was
called), 3 PROVEN DOUBLE-FIRE.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "tool", Usage: "the tool to call (required)"},
			&cli.StringFlag{Name: "args", Value: "{}", Usage: "the tool's arguments, a JSON object, identical in every call"},
			&cli.IntFlag{Name: "calls", Value: 12, Usage: "how many identical calls to make"},
			&cli.StringFlag{Name: "pattern", Value: "storm", Usage: "storm (all calls at once) or retry (one after another, each after the previous answer or --retry-after)"},
			&cli.DurationFlag{Name: "retry-after", Value: probe.DefaultRetryAfter, Usage: "retry pattern: how long to wait for an answer before calling again"},
			&cli.StringFlag{Name: "witness", Usage: "shell `COMMAND` that prints a number; run before and after"},
			&cli.StringFlag{Name: "witness-kind", Value: "state", Usage: "what the witness's number is: executions (one per run of the tool) or state (a reading of the result; never proves once)"},
			&cli.DurationFlag{Name: "timeout", Value: time.Minute, Usage: "how long to wait for all answers"},
			&cli.BoolFlag{Name: "json", Usage: "print the report (or the error) as JSON"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			ctx, stopper, stop := stopChildOnSignals(ctx)
			defer stop()
			reported, err := runProbe(ctx, cmd, io, stopper)
			if err != nil && !reported && cmd.Bool("json") {
				writeJSONError(io.out, err)
			}
			return err
		},
	}
}

// runProbe runs the probe; reported is true once a report was written to io.out.
func runProbe(ctx context.Context, cmd *cli.Command, io streams, stopper *childStopper) (reported bool, err error) {
	args, err := probe.ParseArgs(cmd.String("args"))
	if err != nil {
		return false, usageErr("%v", err)
	}
	opts := probe.Options{Tool: cmd.String("tool"), Args: args, Calls: int(cmd.Int("calls")), Timeout: cmd.Duration("timeout"),
		Pattern: probe.Pattern(cmd.String("pattern")), WitnessKind: probe.WitnessKind(cmd.String("witness-kind")), RetryAfter: cmd.Duration("retry-after")}
	if cmd.IsSet("retry-after") && opts.RetryAfter <= 0 {
		// probe.Options reads 0 as "the default": said on the command line it would wait 5 s.
		return false, usageErr("--retry-after must be positive, got %s", opts.RetryAfter)
	}
	if err := opts.Validate(); err != nil {
		return false, usageErr("%v", err)
	}
	if opts.Timeout <= 0 {
		return false, usageErr("--timeout must be positive")
	}
	if w := cmd.String("witness"); w != "" {
		opts.Witness = probe.CommandWitness{Command: w}
	} else if cmd.IsSet("witness-kind") {
		// Said without a witness, the kind would be silently ignored: the user meant one.
		return false, usageErr("--witness-kind describes a --witness command's number: give --witness too")
	}
	argv, err := serverCommand(cmd)
	if err != nil {
		return false, err
	}
	clearBar := func() {}
	if isTerminal(io.err) {
		bar := progressbar.NewOptions(opts.Calls, progressbar.OptionSetWriter(io.err),
			progressbar.OptionSetDescription("answers"), progressbar.OptionShowCount(),
			progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(50*time.Millisecond))
		opts.Answered = func() { _ = bar.Add(1) }
		clearBar = func() { _ = bar.Clear() }
	}
	rep, err := probe.Run(ctx, opts, func(ctx context.Context) (probe.Conn, error) {
		conn, err := probe.Spawn(ctx, argv, nil, safetext.NewWriter(io.err))
		if err != nil {
			return nil, fmt.Errorf("%q did not start as an MCP server: %s; nothing was called", strings.Join(argv, " "), oneLine(strings.TrimPrefix(err.Error(), "mcpstdio: ")))
		}
		return conn, nil
	})
	clearBar()
	if err := stopper.stopped("the server was shut down; calls already sent may have run, and no report is given for an interrupted probe"); err != nil {
		return false, err
	}
	var unknown *probe.UnknownToolError
	if errors.As(err, &unknown) {
		return false, usageErr("%v", err)
	}
	if err != nil {
		return false, err
	}
	if cmd.Bool("json") {
		b, err := rep.JSON()
		if err != nil {
			return false, err
		}
		if _, err := io.out.Write(safetext.JSON(b)); err != nil {
			return false, err
		}
	} else if err := rep.WriteText(io.out, colourFor(io.out)); err != nil {
		return true, err
	}
	switch {
	case rep.Verdict == probe.DoubleFire:
		return true, exitCoder{exitDoubleFire, errors.New(rep.Summary())}
	case rep.Succeeded+rep.ToolErrors+rep.ProtocolErrors == 0:
		return true, fmt.Errorf("none of the %d calls was answered", rep.Calls-rep.NotSent)
	case rep.WitnessError != "":
		return true, fmt.Errorf("%s; the %d calls were made and the report rests on their answers alone", rep.WitnessError, rep.Calls-rep.NotSent)
	}
	return true, nil
}

// writeJSONError prints, for --json, what stopped the probe as one JSON object, so a script
// that parses stdout gets a reason instead of nothing: the code is "usage" (exit 2, nothing
// was called) or "cannot_run" (exit 1).
func writeJSONError(w io.Writer, err error) {
	code, exit := "cannot_run", exitError
	var ec exitCoder
	if errors.As(err, &ec) {
		exit = ec.code
		if ec.code == exitUsage {
			code = "usage"
		}
	}
	b, merr := json.Marshal(map[string]any{"error": map[string]any{"code": code, "message": err.Error(), "exit": exit}})
	if merr != nil {
		return
	}
	_, _ = w.Write(append(safetext.JSON(b), '\n'))
}

// serverCommand returns the command after `--` and checks that its program exists, so a typo
// is one clear line before anything is started.
func serverCommand(cmd *cli.Command) ([]string, error) {
	argv := childArgs(cmd)
	if len(argv) == 0 || argv[0] == "" {
		return nil, usageErr("no server command: put it after --, e.g. effectfence %s --tool T -- npx -y @modelcontextprotocol/server-everything", cmd.Name)
	}
	if err := lookCommand(argv[0]); err != nil {
		return nil, usageErr("cannot run the server command %q: %v; nothing was started", argv[0], unwrapExec(err))
	}
	return argv, nil
}

func unwrapExec(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// colourFor decides colour once, from the stream being written to, for every command's
// report: only a terminal, never with NO_COLOR set (https://no-color.org: any non-empty
// value), and never with TERM=dumb (a terminal that shows escapes as text).
func colourFor(w io.Writer) bool {
	return os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb" && isTerminal(w)
}

// isTerminal reports whether w is a terminal (progress is drawn only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
