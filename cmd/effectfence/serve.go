package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/serve"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/urfave/cli/v3"
)

func serveCommand(io streams) *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the fence as an MCP stdio server (fence_prepare, fence_commit, fence_abort, fence_release, fence_heartbeat, fence_status, fence_stats)",
		Description: "Speaks MCP on stdin/stdout (stdout carries protocol only; diagnostics go to stderr).\n" +
			"The ledger is durable by default: the SQLite file server.db in $XDG_STATE_HOME/effectfence\n" +
			"(~/.local/state/effectfence). " + store.EnvLedger + " or --ledger choose another (a path, memory,\n" +
			"postgres://...). Plain `effectfence` with stdin not a terminal runs this server.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "ledger", Usage: "ledger: a SQLite file path, memory, or postgres://... (default: $" + store.EnvLedger + ", else server.db in the state directory)"},
			&cli.FloatFlag{Name: "lease-secs", Usage: "lease of an admitted attempt in seconds (1 to 30 days), renewed by fence_heartbeat (default: $" + store.EnvLeaseSecs + ", else 60)", HideDefault: true},
			&cli.FloatFlag{Name: "result-ttl-secs", Usage: "how long a done outcome is replayed, in seconds (1 to 366 days) (default: $" + store.EnvTTLSecs + ", else 86400)", HideDefault: true},
			&cli.IntFlag{Name: "workers", Value: serve.DefaultWorkers, Usage: "tool calls served at once (1-100)"},
			&cli.StringFlag{Name: "on-lease-expiry", Usage: "fence: a lapsed or orphaned claim becomes unknown; reclaim: every claim is re-run safe and taken over (default: $" + store.EnvOnLeaseExpiry + ", else fence)", HideDefault: true},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return usageErr("serve takes no arguments, got %q", cmd.Args().First())
			}
			opts, err := store.FromEnv("server", envSetByFlags(cmd)...)
			if err != nil {
				return usageErr("%v", err)
			}
			if cmd.IsSet("ledger") {
				if cmd.String("ledger") == "" {
					return emptyLedgerFlag("serve")
				}
				opts.Ledger = cmd.String("ledger")
			}
			if cmd.IsSet("lease-secs") {
				if opts.LeaseTTL, err = store.LeaseSeconds("--lease-secs", cmd.Float("lease-secs")); err != nil {
					return usageErr("%v", err)
				}
			}
			if cmd.IsSet("result-ttl-secs") {
				if opts.ResultTTL, err = store.ResultSeconds("--result-ttl-secs", cmd.Float("result-ttl-secs")); err != nil {
					return usageErr("%v", err)
				}
			}
			if cmd.IsSet("on-lease-expiry") {
				if opts.OnLeaseExpiry, err = fence.ParseExpiryPolicy(cmd.String("on-lease-expiry")); err != nil {
					return usageErr("--on-lease-expiry: %v", err)
				}
			}
			workers := cmd.Int("workers")
			if workers < 1 || workers > 100 {
				return usageErr("--workers=%d: want 1 to 100", workers)
			}
			if err := store.CheckLedger(opts.Ledger); err != nil {
				return usageErr("%v", err)
			}
			return runServe(ctx, io, opts, workers)
		},
	}
}

// stdinIsTerminal reports whether in is an interactive terminal. A reader that is not a file
// (tests) counts as a pipe.
func stdinIsTerminal(in any) bool {
	f, ok := in.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// runServe opens the ledger and serves MCP on the streams until stdin ends or a signal comes.
// The first SIGINT or SIGTERM ends waiting prepares and lets settling calls finish; a second
// exits at once.
func runServe(ctx context.Context, io streams, opts store.Options, workers int) error {
	ctx, stop := stopOnSignals(ctx, func(sig os.Signal) {
		fmt.Fprintf(io.err, "effectfence serve: %v: stopping; waiting prepares end, settling calls finish (send the signal again to exit at once)\n", sig)
	}, func(sig os.Signal) {
		fmt.Fprintf(io.err, "effectfence serve: %v again: exiting now\n", sig)
	})
	defer stop()
	// A client that closes our stdout must not kill us with SIGPIPE mid-commit: with SIGPIPE
	// notified, writes fail with EPIPE and the server ends cleanly, counters flushed.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	// What an agent sends can end up in a log line: each entry is escaped into one line.
	logger := log.New(safetext.NewLogWriter(io.err), "effectfence serve: ", log.LstdFlags)
	opts.Log = io.err
	opts.SweepInBackground = true // the first call does not wait for a backlog of expired outcomes
	led, err := store.Open(ctx, opts)
	if err != nil {
		return err
	}
	cfg := led.Config()
	logger.Printf("ledger %s (lease %s, results kept %s), %d workers", shownLedger(opts, led), cfg.LeaseTTL, cfg.ResultTTL, workers)
	sopts := serve.Options{Workers: workers, Version: versionString(), Log: logger}
	if led.Location != "memory" {
		sopts.ClearHint = ledgerHintOf(opts, led, "serve")
	} else {
		sopts.InMemory = true // no ledger command reaches it
	}
	srv, err := serve.New(led.Engine, sopts)
	if err != nil {
		led.Close()
		return err
	}
	serveErr := srv.Serve(ctx, io.in, io.out)
	// Close flushes this process's counters into the ledger.
	if err := led.Close(); err != nil && serveErr == nil {
		return fmt.Errorf("closing ledger %s: %w", led.Location, err)
	}
	return serveErr
}

// envSetByFlags names the environment variables whose settings cmd's flags give: flags win
// over the environment, so those variables are not read (a malformed one does not stop the
// command whose flag replaces it).
func envSetByFlags(cmd *cli.Command) []string {
	var envs []string
	for flag, env := range map[string]string{"lease-secs": store.EnvLeaseSecs, "result-ttl-secs": store.EnvTTLSecs, "on-lease-expiry": store.EnvOnLeaseExpiry} {
		if cmd.IsSet(flag) {
			envs = append(envs, env)
		}
	}
	return envs
}
