package main

import (
	"context"
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
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return usageErr("demo takes no arguments, got %q", cmd.Args().First())
			}
			ctx, stopper, stop := stopChildOnSignals(ctx)
			defer stop()
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("demo: cannot find this binary to run it as the demo server: %w", err)
			}
			dir, err := os.MkdirTemp("", "effectfence-demo-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			var childErr io.Writer = io.Discard
			if cmd.Bool("verbose") {
				childErr = safetext.NewWriter(s.err)
			}
			_, err = demo.Run(ctx, s.out, demo.Options{
				Self: self, Dir: dir, Colour: colourFor(s.out),
				Spawn: func(ctx context.Context, argv, env []string) (probe.Conn, error) {
					return probe.Spawn(ctx, argv, env, childErr)
				},
			})
			if serr := stopper.stopped("the demo's servers were shut down"); serr != nil {
				return serr
			}
			return err
		},
	}
}
