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
	"regexp"
	"strconv"
	"strings"

	"github.com/effectfence/effectfence/internal/safetext"
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

// exitCoder carries an exit code through urfave/cli.
type exitCoder struct {
	code int
	err  error
}

func (e exitCoder) Error() string { return e.err.Error() }
func (e exitCoder) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return exitCoder{exitUsage, fmt.Errorf(format, a...)}
}

// inCommand names the command line a usage error belongs to ("effectfence wrap"), so the
// hint can name its help.
type inCommand struct {
	cmd string
	err error
}

func (e inCommand) Error() string { return e.err.Error() }
func (e inCommand) Unwrap() error { return e.err }

// streams are the writers every command reports to, injected so tests read plain text.
type streams struct {
	in       io.Reader
	out, err io.Writer
}

func main() {
	os.Exit(run(context.Background(), os.Args, streams{os.Stdin, os.Stdout, os.Stderr}))
}

// noHelpTopic is the usage error for a help that names no command. `effectfence help nosuch`
// asked the help command; `effectfence ledger nosuch --help` (or `nosuch --help`) asked for the
// help of a command that does not exist, which is said as a mistyped command is, naming the
// help that lists the commands it was looked for among.
func noHelpTopic(root *cli.Command, args []string, topic string) error {
	c := root
	for _, a := range args[1:] {
		if a == "--" {
			break
		}
		if a == "help" || a == "h" {
			if c != root {
				return exitCoder{exitUsage, fmt.Errorf("help: no %s command %s; the %s commands are listed by `effectfence %s --help`", c.Name, topic, c.Name, c.Name)}
			}
			break
		}
		if strings.HasPrefix(a, "-") {
			continue
		}
		sub := c.Command(a)
		if sub != nil {
			c = sub
			continue
		}
		if c == root {
			return usageErr("unknown command %q; run `effectfence --help` to see the commands", a)
		}
		return usageErr("unknown %s command %q; run `effectfence %s --help`", c.Name, a, c.Name)
	}
	return exitCoder{exitUsage, fmt.Errorf("help: no command %s; the commands are listed by `effectfence --help`", topic)}
}

// run executes the command line and returns the process exit code. Errors are one line on
// stderr (escaped: they can quote a ledger or a server); a usage error adds a hint naming the
// help to read. Nothing is written to stdout on an error path, so a typo in an MCP client's
// config never puts help text on the protocol channel.
func run(ctx context.Context, args []string, io streams) int {
	root := rootCommand(io)
	usageEverywhere(root, io, args)
	err := root.Run(ctx, args)
	if err == nil {
		return exitOK
	}
	if topic, ok := strings.CutPrefix(err.Error(), "No help topic for "); ok {
		err = noHelpTopic(root, args, topic)
	}
	fmt.Fprintln(io.err, "effectfence: "+safetext.Escape(err.Error()))
	var ec exitCoder
	if !errors.As(err, &ec) {
		return exitError
	}
	if ec.code == exitUsage && !strings.Contains(err.Error(), "--help") {
		name := root.Name
		var in inCommand
		if errors.As(err, &in) {
			name = in.cmd
		}
		fmt.Fprintf(io.err, "run `%s --help` for usage\n", name)
	}
	return ec.code
}

// usageEverywhere makes every command report its usage errors the same way: urfave/cli's
// own handling prints the whole help to stdout and exits 1, and OnUsageError is not inherited
// by subcommands, so it is set here on each one. A usage error returned by an action is
// tagged with the command that raised it, for the hint. A command marked jsonErrors (probe)
// whose --json was asked for also gets its JSON error object on stdout, as its action writes
// it for its other usage errors; every other command keeps stdout empty.
func usageEverywhere(cmd *cli.Command, io streams, args []string) {
	cmd.OnUsageError = func(_ context.Context, c *cli.Command, err error, _ bool) error {
		uerr := exitCoder{exitUsage, inCommand{c.FullName(), errors.New(flagMessage(c, err))}}
		if c.Metadata[jsonErrors] == true && jsonAsked(c, args) {
			writeJSONError(io.out, uerr)
		}
		return uerr
	}
	if act := cmd.Action; act != nil {
		cmd.Action = func(ctx context.Context, c *cli.Command) error {
			err := act(ctx, c)
			var ec exitCoder
			var in inCommand
			if errors.As(err, &ec) && ec.code == exitUsage && !errors.As(err, &in) {
				return exitCoder{exitUsage, inCommand{c.FullName(), err}}
			}
			return err
		}
	}
	for _, sub := range cmd.Commands {
		usageEverywhere(sub, io, args)
	}
}

// jsonErrors marks (in cli.Command.Metadata) a command whose --json promises a JSON error
// object on stdout when it cannot run.
const jsonErrors = "effectfence/json-errors"

// jsonAsked reports whether --json was given to c: parsed already, or, when flag parsing
// stopped at an earlier bad flag, present among the command line's flags (before "--").
func jsonAsked(c *cli.Command, args []string) bool {
	if c.Bool("json") {
		return true
	}
	asked := false
	for _, a := range args {
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "json" {
			continue
		}
		asked = true
		if hasVal {
			b, err := strconv.ParseBool(val)
			asked = err == nil && b
		}
	}
	return asked
}

var (
	undefinedFlag = regexp.MustCompile(`^flag provided but not defined: -+(.+)$`)
	goFlagName    = regexp.MustCompile(`(^|[ :])-([A-Za-z][A-Za-z0-9-]*)`)
)

// flagMessage turns the flag package's wording ("flag provided but not defined: -fence-read")
// into the one a user typed ("unknown flag --fence-read"), with the nearest flag of the
// command when there is one close enough to be a typo.
func flagMessage(c *cli.Command, err error) string {
	msg := err.Error()
	if m := undefinedFlag.FindStringSubmatch(msg); m != nil {
		msg = "unknown flag --" + m[1]
		if near := nearestFlag(c, m[1]); near != "" {
			msg += "; did you mean --" + near + "?"
		}
		return msg
	}
	return goFlagName.ReplaceAllString(msg, "$1--$2")
}

// nearestFlag returns the flag name of c closest to typed (edit distance at most 2, or a
// prefix either way), or "".
func nearestFlag(c *cli.Command, typed string) string {
	best, bestD := "", 3
	for _, f := range c.VisibleFlags() {
		for _, name := range f.Names() {
			if len(name) < 2 {
				continue
			}
			d := editDistance(typed, name)
			if strings.HasPrefix(name, typed) || strings.HasPrefix(typed, name) {
				d = min(d, 1)
			}
			if d < bestD {
				best, bestD = name, d
			}
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func rootCommand(io streams) *cli.Command {
	return &cli.Command{
		Name:    "effectfence",
		Usage:   "make the side effects of AI-agent tool calls happen once",
		Version: versionString(),
		Writer:  io.out, ErrWriter: io.err, Reader: io.in,
		HideVersion:    false,
		Commands:       []*cli.Command{versionCommand(io), serveCommand(io), ledgerCommand(io), wrapCommand(io), demoCommand(io), probeCommand(io), demoServerCommand(io), scanCommand(io), policyCommand(io)},
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
				if err := store.CheckLedger(opts.Ledger); err != nil {
					return usageErr("%v", err)
				}
				return runServe(ctx, io, opts, serve.DefaultWorkers)
			}
			return cli.ShowAppHelp(cmd)
		},
	}
}
