package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/scan"
	"github.com/urfave/cli/v3"
)

func scanCommand(io streams) *cli.Command {
	return &cli.Command{
		Name:      "scan",
		Usage:     "find tools in an MCP server's source that could fire the same effect twice (evidence, not a verdict)",
		ArgsUsage: "PATH [--run -- SERVER-COMMAND...]",
		Description: "Reads TS/JS, Python, Go, Rust, Java and Ruby sources under PATH, finds tool declarations,\n" +
			"and reports candidates with the evidence for each: effect words in the name, write sites in the\n" +
			"tool's own code, guards (idempotency keys, request ids, upserts) and retries in the repository.\n" +
			"With --run, it also starts the stdio MCP server given after --, takes its tools/list as ground\n" +
			"truth, follows each published name into the code, and sets the published readOnlyHint and\n" +
			"destructiveHint beside what the code suggests.\n" +
			"Exit 0 when the scan completed, whatever it found; 2 for a missing or non-directory PATH;\n" +
			"1 when --run could not start the server or read its tool list.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "write the report as JSON"},
			&cli.BoolFlag{Name: "sarif", Usage: "write the candidates as SARIF 2.1.0 for code-scanning UIs"},
			&cli.Int64Flag{Name: "max-file-bytes", Value: 1 << 20, Usage: "skip (and report) source files larger than this"},
			&cli.IntFlag{Name: "max-depth", Value: 40, Usage: "skip (and report) folders nested deeper than this"},
			&cli.BoolFlag{Name: "run", Usage: "start the MCP server given after -- and use its tools/list as ground truth"},
			&cli.DurationFlag{Name: "run-timeout", Value: 30 * time.Second, Usage: "with --run: bound on starting the server and listing its tools"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args := cmd.Args().Slice()
			var server []string
			if cmd.Bool("run") {
				if len(args) < 2 {
					return usageErr("--run needs the server command after --: effectfence scan PATH --run -- npx some-mcp-server")
				}
				args, server = args[:1], args[1:]
				if cmd.Duration("run-timeout") <= 0 {
					return usageErr("--run-timeout must be positive")
				}
			}
			if len(args) != 1 {
				return usageErr("scan takes exactly one PATH (got %d arguments; a server command needs --run)", len(args))
			}
			if cmd.Bool("json") && cmd.Bool("sarif") {
				return usageErr("choose one of --json and --sarif")
			}
			if cmd.Int64("max-file-bytes") <= 0 || cmd.Int("max-depth") <= 0 {
				return usageErr("--max-file-bytes and --max-depth must be positive")
			}
			opts := scan.Options{
				MaxFileBytes: cmd.Int64("max-file-bytes"),
				MaxDepth:     cmd.Int("max-depth"),
			}
			// Checked before --run starts a server; the same words as scan.Scan's.
			if _, err := os.Stat(args[0]); err != nil {
				return usageErr("%v: %s", scan.ErrBadRoot, args[0])
			} else if err := scan.CheckRoot(args[0]); err != nil {
				return usageErr("%v", err)
			}
			ctx, stopper, stop := stopChildOnSignals(ctx)
			defer stop()
			if server != nil {
				pub, err := scan.ListPublished(ctx, scan.RunConfig{Command: server, Timeout: cmd.Duration("run-timeout"), Stderr: safetext.NewWriter(io.err)})
				if serr := stopper.stopped("the server was shut down"); serr != nil {
					return serr
				}
				if err != nil {
					return fmt.Errorf("scan --run: %w", err)
				}
				if pub == nil {
					pub = []scan.PublishedTool{}
				}
				opts.Published, opts.RunCommand = pub, server
			}
			rep, err := scan.Scan(ctx, args[0], opts)
			if serr := stopper.stopped("the scan did not finish"); serr != nil {
				return serr
			}
			if errors.Is(err, scan.ErrBadRoot) {
				return usageErr("%v", err)
			}
			if err != nil {
				return err
			}
			switch {
			case cmd.Bool("json"):
				return scan.WriteJSON(jsonOut{io.out}, rep)
			case cmd.Bool("sarif"):
				return scan.WriteSARIF(jsonOut{io.out}, rep, versionString())
			default:
				return scan.WriteText(io.out, rep, colourFor(io.out))
			}
		},
	}
}
