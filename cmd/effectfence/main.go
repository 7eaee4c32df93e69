// Command effectfence makes the side effects of AI-agent tool calls happen once.
//
// This file wires the commands; each command lives in its own file and calls into pkg/.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/effectfence/effectfence/pkg/serve"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/urfave/cli/v3"
)

// Exit codes, stable and documented in README.md.
const (
	exitOK    = 0
	exitError = 1 // the command ran and failed
	exitUsage = 2 // bad arguments, unknown command, bad path
)

// exitError carries an exit code through urfave/cli.
type exitCoder struct {
	code int
	err  error
}

func (e exitCoder) Error() string { return e.err.Error() }
func (e exitCoder) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return exitCoder{exitUsage, fmt.Errorf(format, a...)}
}

// streams are the writers every command reports to, injected so tests read plain text.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

func main() {
	os.Exit(run(context.Background(), os.Args, streams{os.Stdin, os.Stdout, os.Stderr}))
}

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, io streams) int {
	root := rootCommand(io)
	err := root.Run(ctx, args)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(io.err, "effectfence:", err)
	var ec exitCoder
	if errors.As(err, &ec) {
		return ec.code
	}
	return exitError
}

func rootCommand(io streams) *cli.Command {
	return &cli.Command{
		Name:    "effectfence",
		Usage:   "make the side effects of AI-agent tool calls happen once",
		Version: versionString(),
		Writer:  io.out, ErrWriter: io.err, Reader: io.in,
		HideVersion:    false,
		Commands:       []*cli.Command{versionCommand(io), serveCommand(io), ledgerCommand(io), wrapCommand(io), demoCommand(io), probeCommand(io), demoServerCommand(io), scanCommand(io)},
		OnUsageError:   func(_ context.Context, _ *cli.Command, err error, _ bool) error { return usageErr("%v", err) },
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return usageErr("unknown command %q; run `effectfence --help` to see the commands", cmd.Args().First())
			}
			if !stdinIsTerminal(io.in) {
				// An MCP client config runs `"command": "effectfence"` with no arguments.
				opts, err := store.FromEnv("server")
				if err != nil {
					return usageErr("%v", err)
				}
				return runServe(ctx, io, opts, serve.DefaultWorkers)
			}
			return cli.ShowAppHelp(cmd)
		},
	}
}
