package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/httpback"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
	"github.com/effectfence/effectfence/pkg/policy"
	"github.com/effectfence/effectfence/pkg/scan"
	"github.com/effectfence/effectfence/pkg/wrap"
)

func policyCommand(io streams) *cli.Command {
	return &cli.Command{
		Name:  "policy",
		Usage: "check or generate a wrap policy file (docs/policy.md)",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return usageErr("unknown policy command %q; run `effectfence policy --help`", cmd.Args().First())
			}
			return cli.ShowSubcommandHelp(cmd)
		},
		Commands: []*cli.Command{
			policyCheckCommand(io),
			policyInitCommand(io),
		},
	}
}

func policyCheckCommand(io streams) *cli.Command {
	return &cli.Command{
		Name:      "check",
		Usage:     "check a policy file: exit 0 with a summary, or 2 with every error as file:line:col: message",
		ArgsUsage: "FILE",
		Flags:     []cli.Flag{&cli.BoolFlag{Name: "json", Usage: `print {"file":…,"ok":true,"summary":…}, or {"file":…,"ok":false,"errors":[{"line":…,"column":…,"message":…}]} (exit 2)`}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return usageErr("policy check takes exactly one FILE (got %d arguments)", cmd.Args().Len())
			}
			p, err := policy.Load(cmd.Args().First())
			var errs policy.Errors
			if cmd.Bool("json") {
				return policyCheckJSON(io, cmd.Args().First(), p, err)
			}
			if errors.As(err, &errs) {
				for _, e := range errs {
					fmt.Fprintln(io.err, safetext.Escape(e.Error()))
				}
				return exitCoder{exitUsage, fmt.Errorf("%s: not accepted (%s; the format is in docs/policy.md and `effectfence policy check --help`)", cmd.Args().First(), plural(len(errs), "error"))}
			} else if err != nil {
				return usageErr("%v", err)
			}
			fmt.Fprintln(io.out, safetext.Escape(p.Summary()))
			return nil
		},
	}
}

func policyInitCommand(io streams) *cli.Command {
	first := 1
	return &cli.Command{
		Name:      "init",
		Usage:     "list an MCP server's tools and write a commented starting policy from their annotations",
		ArgsUsage: "-- <server command...>",
		Description: "Starts the MCP stdio server <server command...>, lists its tools and writes a policy:\n" +
			"readOnlyHint → fence: false; other tools fenced, idempotentHint → rerun_safe: true;\n" +
			"idempotency-key-like arguments noted (wrap injects the key). --scan PATH adds what\n" +
			"`effectfence scan` finds in the server's code as comments. Review before use.",
		StopOnNthArg:              &first,
		DisableSliceFlagSeparator: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write the policy to `FILE` (refused if it exists, unless --force) instead of stdout"},
			&cli.BoolFlag{Name: "force", Usage: "with -o: replace an existing file"},
			&cli.StringFlag{Name: "scan", Usage: "scan the server's source at `PATH` and add the evidence as comments"},
			&cli.DurationFlag{Name: "timeout", Value: 60 * time.Second, Usage: "bound on starting the server and listing its tools"},
			&cli.StringFlag{Name: "upstream", Usage: "list the tools of the remote MCP server at this Streamable HTTP URL instead of running a command (headers from " + envUpstreamHeaders + ")"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			argv, up, err := serverArgs(cmd, "policy init", "effectfence policy init [-o FILE] [--scan PATH] -- <command...>, or --upstream URL")
			if err != nil {
				return err
			}
			if cmd.Duration("timeout") <= 0 {
				return usageErr("--timeout must be positive")
			}
			out := cmd.String("output")
			if out != "" && !cmd.Bool("force") {
				if _, err := os.Lstat(out); err == nil {
					return usageErr("%s exists; pass --force to replace it", out)
				}
			}
			// Like probe and scan --run: the server runs in its own process group, which a
			// terminal's Ctrl-C does not reach. Before 2026-12-07 policy init died of the signal
			// and left what the server command had started (npx's node) running under init.
			ctx, stopper, stop := stopChildOnSignals(ctx)
			defer stop()
			var src policy.Source
			if up != nil {
				src.Server = up.shown
			} else {
				src.Server = serverShown(argv)
			}
			if path := cmd.String("scan"); path != "" {
				rep, err := scan.Scan(ctx, path, scan.Options{})
				if errors.Is(err, scan.ErrBadRoot) {
					return usageErr("--scan: %v", err)
				} else if err != nil {
					return fmt.Errorf("--scan: %w", err)
				}
				src.Scan, src.ScanPath = rep, path
			}
			if serr := stopper.stopped("nothing was written"); serr != nil {
				return serr
			}
			var pages []json.RawMessage
			if up != nil {
				pages, err = listUpstreamPages(ctx, up, cmd.Duration("timeout"), io)
			} else {
				if err := lookCommand(argv[0]); err != nil {
					return usageErr("cannot run the MCP server command %q: %v", argv[0], unwrapExec(err))
				}
				pages, err = listToolPages(ctx, argv, cmd.Duration("timeout"), io)
			}
			if serr := stopper.stopped("the server was shut down and nothing was written"); serr != nil {
				return serr
			}
			if err != nil && errors.Is(err, context.DeadlineExceeded) {
				// It said only "context deadline exceeded" before 2026-12-07, with no word of
				// which bound passed or how to give the server more time.
				return fmt.Errorf("policy init: the server did not start and list its tools within %s (--timeout); nothing was written: %w", cmd.Duration("timeout"), err)
			}
			if err != nil {
				return fmt.Errorf("policy init: %w", err)
			}
			var buf bytes.Buffer
			if err := policy.Generate(&buf, pages, src); err != nil {
				return fmt.Errorf("policy init: %w", err)
			}
			if out == "" {
				_, err := io.out.Write(buf.Bytes())
				return err
			}
			return writeFileAtomic(out, buf.Bytes())
		},
	}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprint(n, " ", what, "s")
}

// listToolPages starts the server, lists every page of its tools and stops it. (An HTTP
// upstream would list its pages the same way and hand them to policy.Generate.)
func listToolPages(ctx context.Context, argv []string, timeout time.Duration, io streams) ([]json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := mcpstdio.Start(ctx, mcpstdio.Config{
		Command: argv, Stderr: safetext.NewWriter(io.err), InitTimeout: timeout,
		Init: mcpstdio.DefaultInit("effectfence-policy-init", versionString()),
	})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return listPages(ctx, s)
}

// listUpstreamPages lists every page of the tools of a remote server.
func listUpstreamPages(ctx context.Context, up *upstreamConfig, timeout time.Duration, io streams) ([]json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	u := httpback.NewUpstream(httpback.Config{
		URL: up.url, Header: up.header, InitTimeout: timeout, Log: safetext.NewWriter(io.err),
		Init: mcpstdio.DefaultInit("effectfence-policy-init", versionString()),
	})
	defer u.Close()
	s, err := u.Session(ctx)
	if err != nil {
		return nil, err
	}
	return listPages(ctx, s)
}

// listPages lists every page of a server's tools.
func listPages(ctx context.Context, s interface {
	Call(context.Context, string, json.RawMessage) (json.RawMessage, error)
}) ([]json.RawMessage, error) {
	var pages []json.RawMessage
	cursor := ""
	for len(pages) < 1000 {
		var params json.RawMessage
		if cursor != "" {
			params, _ = json.Marshal(map[string]string{"cursor": cursor})
		}
		raw, err := s.Call(ctx, "tools/list", params)
		if err != nil {
			return nil, fmt.Errorf("tools/list: %w", err)
		}
		pages = append(pages, raw)
		_, next, err := wrap.KeyProperties(raw)
		if err != nil {
			return nil, err
		}
		if next == "" {
			return pages, nil
		}
		cursor = next
	}
	return nil, errors.New("tools/list returned more than 1000 pages")
}

// writeFileAtomic writes b to path through a temporary file in the same directory.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".policy-*.yaml")
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// policyCheckJSON is `policy check --json`: the verdict on stdout as one JSON object, exit 2
// when the file is not accepted (its errors listed, with their positions).
func policyCheckJSON(io streams, file string, p *policy.Policy, err error) error {
	type posErr struct {
		Line    int    `json:"line,omitempty"`
		Column  int    `json:"column,omitempty"`
		Message string `json:"message"`
	}
	out := struct {
		File    string   `json:"file"`
		OK      bool     `json:"ok"`
		Summary string   `json:"summary,omitempty"`
		Errors  []posErr `json:"errors,omitempty"`
	}{File: file, OK: err == nil}
	var errs policy.Errors
	switch {
	case errors.As(err, &errs):
		for _, e := range errs {
			out.Errors = append(out.Errors, posErr{e.Line, e.Column, e.Msg})
		}
	case err != nil:
		out.Errors = []posErr{{Message: err.Error()}}
	default:
		out.Summary = p.Summary()
	}
	b, merr := json.Marshal(out)
	if merr != nil {
		return merr
	}
	if _, werr := fmt.Fprintf(io.out, "%s\n", b); werr != nil {
		return werr
	}
	if err != nil {
		return exitCoder{exitUsage, fmt.Errorf("%s: not accepted (%s)", file, plural(len(out.Errors), "error"))}
	}
	return nil
}

// serverShown names a server command in a generated policy, a file made to be reviewed and
// committed, and in wrap's log: by its program alone, since an argument can hold a key or a
// password (`server-postgres postgresql://user:password@host/db`, `--api-key sk_live_…`).
// Before 2026-12-04 the whole command line was written there.
func serverShown(argv []string) string {
	shown := wrap.ShellJoin([]string{filepath.Base(argv[0])})
	switch n := len(argv) - 1; n {
	case 0:
	case 1:
		shown += " (and 1 argument, not written here: it can hold a key or a password)"
	default:
		shown += fmt.Sprintf(" (and %d arguments, not written here: they can hold a key or a password)", n)
	}
	return shown
}
