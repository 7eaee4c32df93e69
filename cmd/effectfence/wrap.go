package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/effectfence/effectfence/internal/logfmt"
	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/policy"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/postgres"
	"github.com/effectfence/effectfence/pkg/wrap"
)

func wrapCommand(io streams) *cli.Command {
	first := 1
	return &cli.Command{
		Name:      "wrap",
		Usage:     "put an MCP stdio server behind the fence: identical side-effecting calls run once",
		ArgsUsage: "-- <command...>",
		Description: "Runs the MCP server <command...> as a child and serves the same tools on stdin/stdout.\n" +
			"Identical calls of a tool (same canonical arguments) run once; duplicates wait for the\n" +
			"first or receive its recorded result. Tools annotated readOnlyHint pass through.\n" +
			"The ledger is per scope (command, working directory, environment, or --scope NAME):\n" +
			"`effectfence ledger ... [--scope NAME] --for -- <command...>` from the same directory and\n" +
			"environment, or --ledger with the path wrap logs at startup (fenced calls name it).",
		StopOnNthArg:              &first,
		DisableSliceFlagSeparator: true,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "text, or json: one JSON object per log line on stderr (time, level, source, msg)"},
			&cli.StringFlag{Name: "ledger", Usage: "ledger: a SQLite file path, \"memory\", or postgres://... (default: " + store.EnvLedger + ", else the per-command file)"},
			&cli.FloatFlag{Name: "lease-secs", DefaultText: "60", Usage: "lease of a running call in seconds (1 to 30 days), renewed every third (env " + store.EnvLeaseSecs + ")"},
			&cli.FloatFlag{Name: "result-ttl-secs", DefaultText: "86400", Usage: "how long a result is replayed, in seconds (1 to 366 days) (env " + store.EnvTTLSecs + ")"},
			&cli.DurationFlag{Name: "wait", Value: wrap.DefaultWait, Usage: "how long a duplicate waits for the identical call in flight"},
			&cli.BoolFlag{Name: "fence-reads", Usage: "fence tools annotated readOnlyHint too"},
			&cli.StringSliceFlag{Name: "fence", Usage: "fence this tool even if annotated read-only (repeatable)"},
			&cli.StringSliceFlag{Name: "pass", Usage: "pass this tool through unfenced (repeatable)"},
			&cli.StringSliceFlag{Name: "ignore-field", Usage: "TOOL:json.path left out of the call's identity, e.g. charge:meta.timestamp (repeatable)"},
			&cli.StringSliceFlag{Name: "key", Usage: "TOOL:path,path naming the identity fields of a tool; the full arguments must still match (repeatable)"},
			&cli.StringSliceFlag{Name: "redact", Usage: "TOOL:json.path whose value the ledger stores as [redacted]; identity still uses it, e.g. charge:card.number (* matches any member; repeatable)"},
			&cli.StringSliceFlag{Name: "keep-result", Usage: "TOOL=hash keeps only the SHA-256 of the tool's results: duplicates are told it was done, never re-run, but get no result (repeatable)"},
			&cli.BoolFlag{Name: "no-inject-key", Usage: "do not fill an empty idempotency-key-like argument with the call's hash"},
			&cli.StringFlag{Name: "on-lease-expiry", DefaultText: "fence", Usage: "fence: a lapsed claim becomes unknown unless its tool is --rerun-safe; reclaim: every tool is re-run safe (env " + store.EnvOnLeaseExpiry + ")"},
			&cli.StringSliceFlag{Name: "rerun-safe", Usage: "TOOL whose calls may run twice without harm: its lapsed or orphaned claims are taken over instead of fenced (repeatable)"},
			&cli.StringSliceFlag{Name: "replay-window", Usage: "how long a recorded result answers an identical call: DUR for every tool, or TOOL=DUR (repeatable); later identical calls run as new actions (default " + wrap.DefaultReplayWindow.String() + ")"},
			policyFlag(),
			&cli.StringFlag{Name: "scope", Usage: "name the server's scope explicitly (fleets sharing receipts across directories or environments); default: derived from the command, working directory and environment"},
			&cli.IntFlag{Name: "max-concurrent", Value: wrap.DefaultMaxConcurrent, Usage: "requests forwarded to the MCP server at once (duplicates waiting for a call in flight, and tasks/result, which waits for a task to end, take no slot)"},
			&cli.DurationFlag{Name: "init-timeout", Value: 30 * time.Second, Usage: "how long the MCP server may take to answer initialize"},
			&cli.DurationFlag{Name: "grace", Value: wrap.DefaultGrace, Usage: "when stopping (stdin closed, SIGTERM, SIGINT), how long calls in flight may finish; then the MCP server is stopped and each fenced call still inside it is recorded as unknown. A second signal exits at once"},
		}, gatewayFlags()...),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			io := io
			// serverErr is where the MCP servers' stderr goes: with json, a writer that
			// labels every line the server's, whatever it says.
			serverErr := io.err
			switch cmd.String("log-format") {
			case "text":
			case "json":
				lw := logfmt.New(io.err)
				defer lw.Flush()
				sw := lw.Server()
				defer sw.Flush()
				io.err, serverErr = lw, sw
			default:
				return usageErr("--log-format %q: want text or json", cmd.String("log-format"))
			}
			argv, up, err := serverArgs(cmd, "wrap", "effectfence wrap [flags] -- <command...>, or --upstream URL")
			if err != nil {
				return err
			}
			opt, err := wrapOptions(cmd, argv)
			if err != nil {
				return err
			}
			lc, err := checkListen(cmd)
			if err != nil {
				return err
			}
			res, err := wrapPolicy(cmd, opt, io)
			if err != nil {
				return err
			}
			opt = res.Options
			var scope store.Scope
			if up != nil {
				scope = store.UpstreamScope(up.url, res.Scope, up.header)
				opt.Backend = wrap.Upstream(up.url, up.header)
			} else {
				scope = store.CurrentWrapScope(argv, res.Scope)
			}
			opt.Scope = scope.ID
			so, err := store.FromEnv(scope.LedgerName(), envSetByFlags(cmd)...)
			if err != nil {
				return usageErr("%v", err)
			}
			if res.Ledger != "" {
				so.Ledger = res.Ledger
			}
			if err := store.CheckLedger(so.Ledger); err != nil {
				return usageErr("wrap: %v", err)
			}
			if cmd.IsSet("lease-secs") {
				if so.LeaseTTL, err = store.LeaseSeconds("--lease-secs", cmd.Float("lease-secs")); err != nil {
					return usageErr("%v", err)
				}
			}
			if cmd.IsSet("result-ttl-secs") {
				if so.ResultTTL, err = store.ResultSeconds("--result-ttl-secs", cmd.Float("result-ttl-secs")); err != nil {
					return usageErr("%v", err)
				}
			}
			if cmd.IsSet("on-lease-expiry") {
				if so.OnLeaseExpiry, err = fence.ParseExpiryPolicy(cmd.String("on-lease-expiry")); err != nil {
					return usageErr("--on-lease-expiry: %v", err)
				}
			}
			ttl := so.ResultTTL
			if ttl <= 0 {
				ttl = fence.DefaultResultTTL
			}
			for _, w := range res.LongWindows(ttl) {
				fmt.Fprintf(io.err, "effectfence wrap: warning: %s\n", safetext.Escape(w))
			}
			// A command that cannot run is refused before the ledger is opened, so a typo in
			// an MCP config creates no ledger file. (A command that runs but is no MCP server
			// is found at the agent's initialize, which reports why.)
			if up != nil {
				// nothing to look up: the upstream is reached at the agent's initialize
			} else if err := lookCommand(argv[0]); err != nil {
				return usageErr("cannot run the MCP server command %q: %v; nothing was started and no ledger was created", argv[0], unwrapExec(err))
			}
			so.Log = io.err
			so.SweepInBackground = true // the agent's first call does not wait for a backlog of expired outcomes
			led, err := store.Open(ctx, so)
			if err != nil {
				return err
			}
			defer func() {
				// Close records this process's counters: a ledger deleted or moved while in
				// use refuses that write and names the copy it made of every receipt.
				if err := led.Close(); err != nil {
					fmt.Fprintf(io.err, "effectfence wrap: closing the ledger: %v\n", err)
				}
			}()
			// The log carries the child's stderr: escaped, so the server cannot drive the
			// terminal wrap's stderr is shown on, and on its own writer, so a line of the
			// server's is never labelled effectfence's (--log-format json).
			opt.Engine, opt.Log, opt.ServerStderr = led.Engine, safetext.NewWriter(io.err), safetext.NewWriter(serverErr)
			if opt.InMemory = led.Location == "memory"; !opt.InMemory { // no ledger command reaches it
				opt.ClearHint = ledgerHint(so, led)
			}
			// The server by its program alone, as everywhere else (the ledger, the answers, policy
			// init): an argument can hold a key. Escaped: one line, even for a name holding newlines.
			var what string
			if up != nil {
				what = "the upstream " + up.shown
			} else {
				what = safetext.Escape(serverShown(argv))
			}
			if lc != nil {
				per := "one child per session"
				if up != nil {
					per = "one upstream session per session"
				}
				fmt.Fprintf(io.err, "effectfence wrap: ledger %s; serving %s to HTTP clients, %s\n", safetext.Escape(shownLedger(so, led)), what, per)
				logScopeOf(io, scope, up, so.Ledger == "", argv)
				if up != nil && scope.Name == "" && cmd.Bool("pass-auth") && slices.Contains(scope.Vars, "Authorization") {
					// Each client's own Authorization replaces the configured one, and a client
					// that sends none is sent none, so the header counted in the scope is never
					// sent: such a client's calls share the scope (and the default ledger) of a
					// gateway that sends that token, a caller it does not act as.
					fmt.Fprintf(io.err, "effectfence wrap: warning: with --pass-auth the configured Authorization header is never sent (each client's own is, and a client that sends none is sent none), yet it is part of the scope above: a client without Authorization shares receipts with a wrap that sends that token to this upstream; drop the configured Authorization, or give --scope NAME (docs/gateway.md, --pass-auth)\n")
				}
				return runGateway(ctx, cmd, lc, up, opt, scope, led, io)
			}
			p, err := wrap.New(opt)
			if err != nil {
				return usageErr("%v", err)
			}
			fmt.Fprintf(io.err, "effectfence wrap: ledger %s; serving %s\n", safetext.Escape(shownLedger(so, led)), what)
			logScopeOf(io, scope, up, so.Ledger == "", argv)
			return serveWrap(ctx, p, led, opt.Grace, io)
		},
	}
}

// statsWait bounds the ledger's part of the stats line (the since-boot counters are this
// process's own and are written whatever the ledger does).
const statsWait = time.Second

// serveWrap serves until the agent hangs up or a signal arrives, logging the since-boot
// counters on SIGUSR1 and at exit. A second SIGINT or SIGTERM exits at once.
func serveWrap(ctx context.Context, p *wrap.Proxy, led *store.Ledger, grace time.Duration, io streams) error {
	ctx, stop := stopOnSignals(ctx, func(sig os.Signal) {
		fmt.Fprintf(io.err, "effectfence wrap: %v: stopping; calls in flight get up to %s to finish (send the signal again to exit at once)\n", sig, grace)
	}, func(sig os.Signal) {
		calls := p.InFlight()
		fmt.Fprintf(io.err, "effectfence wrap: %v again: exiting now and killing the MCP server; %s abandoned (a fenced one keeps its claim, which the next process fences as unknown): %s\n", sig, plural(len(calls), "call"), strings.Join(calls, "; "))
		p.Kill()
	})
	defer stop()
	// An agent that closes our stdout must not kill us with SIGPIPE while calls are still
	// being recorded: with SIGPIPE notified, writes fail with EPIPE instead.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)
	usr1 := make(chan os.Signal, 1)
	if len(statsSignals) > 0 { // Notify with no signals would relay every signal
		signal.Notify(usr1, statsSignals...)
		defer signal.Stop(usr1)
	}
	statsLine := func() {
		// Bounded: a ledger that does not answer (a stopped database, a black-holed network)
		// must not keep a stopping wrap from exiting.
		sctx, cancel := context.WithTimeout(context.Background(), statsWait)
		defer cancel()
		st, err := led.Stats(sctx)
		if err != nil {
			fmt.Fprintf(io.err, "effectfence wrap: reading ledger stats: %v\n", err)
		}
		fmt.Fprintln(io.err, st.Line())
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-usr1:
				statsLine()
			case <-done:
				return
			}
		}
	}()
	err := p.Serve(ctx, io.in, io.out)
	statsLine()
	return err
}

// ledgerHint is clearHint of the ledger opened from o: led.Location shows a PostgreSQL URL
// with its password written xxxxx already, and clearHint must see the password to say it was
// left out (before, the commands read as complete and, pasted, failed to log in).
func ledgerHint(o store.Options, led *store.Ledger) string { return ledgerHintOf(o, led, "wrap") }

// ledgerHintOf is ledgerHint for the command who (wrap, serve), which its note names.
func ledgerHintOf(o store.Options, led *store.Ledger, who string) string {
	if raw, err := o.Location(); err == nil {
		return clearHintOf(raw, who)
	}
	return clearHintOf(led.Location, who)
}

// clearHint names this wrap's ledger to `effectfence ledger clear` in a way that is true
// wherever the operator runs it: by its absolute path (`--for` resolves the default file only
// from wrap's own directory and environment, and a relative --ledger only from wrap's
// directory), and a PostgreSQL URL without its password, which must not reach the agent. A
// ledger in memory has none: wrap says so instead (wrap.Options.InMemory).
func clearHint(loc string) string { return clearHintOf(loc, "wrap") }

// clearHintOf is clearHint for the command who (wrap, serve), which its note names.
func clearHintOf(loc, who string) string {
	switch {
	case strings.Contains(loc, "://"):
		red := postgres.Redact(loc)
		if red != loc {
			return "--ledger " + wrap.ShellJoin([]string{red}) + " (with the password of the URL " + who + " was given)"
		}
		return "--ledger " + wrap.ShellJoin([]string{loc})
	}
	if abs, err := filepath.Abs(loc); err == nil {
		loc = abs
	}
	return "--ledger " + wrap.ShellJoin([]string{loc})
}

// shownLedger is the ledger led (opened with o) as a process's first log line names it: a
// file by its absolute path, since that line is what an operator gives `effectfence ledger …
// --ledger` from a shell of their own, while wrap and serve run in the directory their MCP
// client chose. A relative --ledger (or a policy's ledger taken from the policy's directory)
// was logged as given, and from any other directory it named no ledger. Memory and a
// PostgreSQL URL (led.Location: without its password) are named as they are; which one it is
// is read from o, since a URL Redact cannot read is shown as no URL at all.
func shownLedger(o store.Options, led *store.Ledger) string {
	raw, err := o.Location()
	if err != nil || raw == "memory" || strings.Contains(raw, "://") {
		return led.Location
	}
	if abs, err := filepath.Abs(led.Location); err == nil {
		return abs
	}
	return led.Location
}

// logScopeOf is logScope, or for an upstream the line that says its scope is the URL.
func logScopeOf(io streams, scope store.Scope, up *upstreamConfig, defaultLedger bool, argv []string) {
	if up == nil {
		logScope(io, scope, defaultLedger, argv)
		return
	}
	if scope.Name != "" {
		fmt.Fprintf(io.err, "effectfence wrap: scope %q (%s)\n", scope.Name, scope.ID[:16])
		return
	}
	if len(scope.Vars) > 0 {
		fmt.Fprintf(io.err, "effectfence wrap: scope %s: the upstream URL and the headers %s configured for it (values hashed; --scope NAME to set it)\n", scope.ID[:16], strings.Join(scope.Vars, ", "))
		// Before the headers counted, this configuration's default ledger was the URL's own:
		// a call it left unknown is fenced there, not here.
		if dir, err := store.StateDir(); err == nil && defaultLedger {
			old := filepath.Join(dir, store.UpstreamScope(up.url, "", nil).LedgerName()+".db")
			if _, err := os.Stat(old); err == nil {
				fmt.Fprintf(io.err, "effectfence wrap: a ledger of this upstream from before its headers were part of the scope exists at %s; its records are not consulted (see docs/gateway.md); check it for calls left unknown: effectfence ledger ls --ledger %s\n", safetext.Escape(old), shellQuote(old))
			}
		}
		return
	}
	fmt.Fprintf(io.err, "effectfence wrap: scope %s: the upstream URL (hashed; --scope NAME to set it)\n", scope.ID[:16])
}

// logScope says which scope this wrap fences (names, never values) and points at a ledger
// of the same command from before scopes, whose records this wrap does not consult.
func logScope(io streams, scope store.Scope, defaultLedger bool, argv []string) {
	if scope.Name != "" {
		fmt.Fprintf(io.err, "effectfence wrap: scope %q (%s)\n", scope.Name, scope.ID[:16])
	} else {
		fmt.Fprintf(io.err, "effectfence wrap: scope %s: the command, directory %s and %d environment variables (values hashed; --scope NAME to set it)\n", scope.ID[:16], safetext.Escape(scope.Dir), len(scope.Vars))
	}
	if !defaultLedger {
		return
	}
	dir, err := store.StateDir()
	if err != nil {
		return
	}
	// Before 2026-12-06 a desktop launcher's variables counted, and before 2026-12-03 a wrap
	// started through a symlink had the link's path in its scope, and terminals' tab names and
	// Claude Code's session id counted: another default file, where a call it left unknown is
	// fenced, not here.
	for _, b := range scope.Before {
		old := filepath.Join(dir, b.Name+".db")
		if _, err := os.Stat(old); err == nil {
			fmt.Fprintf(io.err, "effectfence wrap: a ledger of this command from before %s (%s) exists at %s; its records are not consulted (see docs/identity.md); check it for calls left unknown: effectfence ledger ls --ledger %s\n", b.Until, safetext.Escape(earlierChange(b, scope.Dir)), safetext.Escape(old), shellQuote(old))
		}
	}
	legacy := filepath.Join(dir, store.LegacyWrapName(argv)+".db")
	if _, err := os.Stat(legacy); err == nil {
		fmt.Fprintf(io.err, "effectfence wrap: a ledger of this command from before scopes exists at %s; its records are not consulted (see docs/identity.md); inspect it with: effectfence ledger ls --ledger %s\n", safetext.Escape(legacy), shellQuote(legacy))
	}
}

// earlierChange says what made a scope's default ledger file b another one: dir is the
// directory as the scope has it, "" when not to be named.
func earlierChange(b store.Earlier, dir string) string {
	if b.Until == "2026-12-06" {
		return "the variables of an application's launch and a terminal's instance left out"
	}
	if dir != "" {
		return "the directory " + dir + " by its real path; terminal and session variables left out"
	}
	return "the directory by its real path; terminal and session variables left out"
}

func wrapOptions(cmd *cli.Command, argv []string) (wrap.Options, error) {
	opt := wrap.Options{
		Command: argv, Wait: cmd.Duration("wait"), FenceReads: cmd.Bool("fence-reads"),
		Fence: cmd.StringSlice("fence"), Pass: cmd.StringSlice("pass"), NoInjectKey: cmd.Bool("no-inject-key"),
		RerunSafe:     cmd.StringSlice("rerun-safe"),
		MaxConcurrent: cmd.Int("max-concurrent"), InitTimeout: cmd.Duration("init-timeout"), Grace: cmd.Duration("grace"),
		Ignore: map[string][]wrap.Path{}, Key: map[string][]wrap.Path{},
	}
	if opt.Wait <= 0 {
		return opt, usageErr("--wait must be positive")
	}
	if opt.MaxConcurrent <= 0 {
		return opt, usageErr("--max-concurrent must be positive")
	}
	if opt.Grace <= 0 {
		return opt, usageErr("--grace must be positive, e.g. 2s")
	}
	if opt.InitTimeout <= 0 {
		return opt, usageErr("--init-timeout must be positive, e.g. 30s")
	}
	for _, s := range cmd.StringSlice("replay-window") {
		tool, dur, perTool := s, s, false
		if i := strings.LastIndexByte(s, '='); i >= 0 {
			tool, dur, perTool = s[:i], s[i+1:], true
		}
		d, err := policy.ParseReplayWindow(strings.TrimSpace(dur))
		if err != nil {
			return opt, usageErr("--replay-window %q: want a positive duration from 1s to 366d such as 10m or 7d, or TOOL=DUR", s)
		}
		if !perTool {
			opt.ReplayWindow = d
			continue
		}
		if opt.ReplayWindows == nil {
			opt.ReplayWindows = map[string]time.Duration{}
		}
		opt.ReplayWindows[tool] = d
	}
	for _, s := range cmd.StringSlice("ignore-field") {
		tool, path, err := wrap.ParseIgnoreField(s)
		if err != nil {
			return opt, usageErr("%v", err)
		}
		opt.Ignore[tool] = append(opt.Ignore[tool], path)
	}
	for _, s := range cmd.StringSlice("key") {
		tool, paths, err := wrap.ParseKey(s)
		if err != nil {
			return opt, usageErr("%v", err)
		}
		if _, dup := opt.Key[tool]; dup {
			return opt, usageErr("--key for tool %q given twice; list all its fields in one --key TOOL:a,b", tool)
		}
		opt.Key[tool] = paths
	}
	if err := privacyOptions(cmd, &opt); err != nil {
		return opt, err
	}
	return opt, nil
}
