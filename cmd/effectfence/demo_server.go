package main

import (
	"context"
	"fmt"
	"time"

	"github.com/effectfence/effectfence/pkg/demo"
	"github.com/urfave/cli/v3"
)

// demoServerCommand is the built-in raw MCP server that `demo` and the tests spawn: the binary
// talks to itself, so nothing needs installing. Hidden from help: it is a prop, not a product.
func demoServerCommand(io streams) *cli.Command {
	return &cli.Command{
		Name:   "demo-server",
		Usage:  "the demo's raw (unfenced) MCP server over stdio",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "effects", Usage: "append one line per execution to this `FILE`"},
			&cli.DurationFlag{Name: "latency", Value: 20 * time.Millisecond, Usage: "how long each effect takes"},
			&cli.StringFlag{Name: "count", Usage: "print the number of executions recorded in this effects `FILE` and exit"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return usageErr("demo-server takes no arguments, got %q", cmd.Args().First())
			}
			if path := cmd.String("count"); path != "" {
				n, err := demo.CountEffects(path)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(io.out, n)
				return err
			}
			if cmd.Duration("latency") < 0 {
				return usageErr("--latency must not be negative")
			}
			return demo.Serve(ctx, io.in, io.out, demo.ServerOptions{
				Effects: cmd.String("effects"),
				Latency: cmd.Duration("latency"),
				Log:     io.err,
			})
		},
	}
}
