package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fatih/color"
	"github.com/olekukonko/tablewriter"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v3"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/policy"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/postgres"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
	"github.com/effectfence/effectfence/pkg/wrap"
)

const ledgerUsage = `The operator's view of a ledger: what is in flight, failed or of unknown outcome;
reconcile (resolve) and clear; verify certificates; export.

Which ledger: --ledger PATH|postgres://… (overrides EFFECTFENCE_LEDGER); for the ledger
of a wrap process, --for -- <the child command exactly as wrap runs it>, run from the same
directory and environment as wrap (its default file follows the server's scope), with
--scope NAME or --policy FILE if wrap was given one (EFFECTFENCE_POLICY is read as wrap reads
it); otherwise the default ledger of ` + "`effectfence serve`" + `.

Text read from the ledger is shown with control characters and characters drawn as nothing
escaped (\x1b, \u202e, \u200b). Tables
shorten long cells on a terminal; in a pipe ids are whole and only a tool, agent or reason
over 1,000 characters is shortened; --wide shortens nothing.

Exit codes: 0 ok; 1 the command failed or found problems (verify, check, ls, export or stats
that left out unreadable records, show or export that left out unreadable audit events, show,
clear or resolve of an intent the ledger does not hold, resolve of an intent that is not
fenced); 2 usage (bad flags or arguments).`

// ledgerCommand is `effectfence ledger`.
func ledgerCommand(io streams) *cli.Command {
	return &cli.Command{
		Name:        "ledger",
		Usage:       "list, inspect, clear, verify, export and check a ledger",
		Description: ledgerUsage,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() > 0 {
				return usageErr("unknown ledger command %q; run `effectfence ledger --help`", cmd.Args().First())
			}
			return cli.ShowSubcommandHelp(cmd)
		},
		Commands: []*cli.Command{
			ledgerSub(io, "ls", "", "list intents (--state in_flight|done|failed|unknown|fenced, repeatable)", 0,
				[]cli.Flag{&cli.StringSliceFlag{Name: "state", Usage: "only intents in this state: in_flight, done, failed, unknown, or fenced (failed and unknown)"}, wideFlag()}, ledgerLs),
			ledgerSub(io, "show", "INTENT", "show one intent: its record, cert and audit trail (its last 50 events; --events)", 1,
				[]cli.Flag{&cli.IntFlag{Name: "events", Value: showEvents, Usage: "show the last `N` audit events of the intent (0: every one); the older are counted, not shown"}}, ledgerShow),
			ledgerSub(io, "clear", "INTENT", "clear a fenced (or any) intent after reconciling it by hand: the next attempt runs", 1,
				[]cli.Flag{&cli.StringFlag{Name: "reason", Usage: "what you checked in the real system (required; recorded with who you are)"},
					&cli.BoolFlag{Name: "force", Usage: "clear it even if its holder may still be running it (its lease runs, its holder process gone or not; or the holder still runs on this host past its lease), or if it is done: the next attempt may run the effect while the holder still runs it, or run it again"},
					claimFlag()}, ledgerClear),
			resolveSub(io),
			ledgerSub(io, "verify", "", "recompute every cert hash and check parent links (of a ledger, or of an export: --export)", 0,
				[]cli.Flag{wideFlag(), &cli.StringFlag{Name: "export", Usage: "verify the export in `FILE` (- for stdin) instead of a ledger: its certs, and that it is whole (its end line)"}}, ledgerVerify),
			ledgerSub(io, "export", "", "write every record and audit event as JSON Lines", 0,
				[]cli.Flag{&cli.StringFlag{Name: "format", Value: "jsonl", Usage: "output format: jsonl (the only one; export is always machine-readable)"}}, ledgerExport),
			ledgerSub(io, "stats", "", "counters over every process that used the ledger, and intents by state", 0, nil, ledgerStats),
			ledgerSub(io, "sweep", "", "drop expired outcomes now (open ledgers also do it on their own)", 0,
				[]cli.Flag{&cli.FloatFlag{Name: "events-older-than-secs", Usage: "also drop the audit events older than this many `SECONDS` (1 to 366 days), except clears, resolves and late results; without it events are left to the wraps and servers that record the ledger's calls, which drop them after their result TTL"}}, ledgerSweep),
			ledgerSub(io, "check", "", "inspect the ledger file read-only: SQLite integrity, schema version, foreign or torn files, unreadable records, and what to do", 0, nil, ledgerCheck),
		},
	}
}

// wideFlag keeps table cells whole. Ids are never shortened when stdout is not a terminal,
// so a pasted or piped intent id is always the whole id; free text is, beyond maxTextCell.
func wideFlag() *cli.BoolFlag {
	return &cli.BoolFlag{Name: "wide", Usage: "do not shorten long cells (on a terminal; in a pipe ids are always whole, and a tool, agent or reason over 1,000 characters is shortened)"}
}

// ledgerCall is what every ledger subcommand gets: its streams, which ledger, its arguments
// (child argv removed), and the parsed command for its own flags.
type ledgerCall struct {
	io   streams
	opts store.Options
	// scope is the scope name --for derived the ledger from (--scope, or a policy's), if any.
	scope string
	args  []string
	json  bool
	cmd   *cli.Command
	out   painter
	// wide: table cells are shown whole (stdout is not a terminal, or --wide).
	wide bool
	// wideFlag: --wide was given: free text is shown whole too, wherever stdout is.
	wideFlag bool
	// tty: stdout is a terminal.
	tty bool
}

func ledgerSub(io streams, name, argsUsage, usage string, nargs int, flags []cli.Flag, run func(context.Context, ledgerCall) error) *cli.Command {
	common := []cli.Flag{
		&cli.StringFlag{Name: "ledger", Usage: "ledger location: a file path or a postgres:// URL (overrides EFFECTFENCE_LEDGER; a memory ledger is seen only by its own process)"},
		&cli.BoolFlag{Name: "for", Usage: "use the default ledger of `effectfence wrap -- <command…>` started from this directory and environment: give the child command after --"},
		&cli.StringFlag{Name: "scope", Usage: "with --for: the --scope NAME that wrap was given"},
		&cli.StringFlag{Name: "policy", Usage: "with --for: the --policy `FILE` that wrap was given (default: " + envPolicy + ", as for wrap); its scope and ledger are wrap's"},
	}
	// export always writes JSON Lines and picks its format with --format alone: one way to
	// choose a format.
	if name != "export" {
		common = append(common, &cli.BoolFlag{Name: "json", Usage: "machine-readable output"})
	}
	au := argsUsage
	if au != "" {
		au += " "
	}
	return &cli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: au + "[--for [--scope NAME] [--policy FILE] -- <command…>]",
		Flags:     append(flags, common...),
		Action: func(ctx context.Context, cmd *cli.Command) error {
			c, err := newLedgerCall(io, cmd, nargs)
			if err != nil {
				return err
			}
			if f, ok := c.io.out.(*os.File); ok && name == "export" && readWriteDevNull(f) {
				// Most likely stdout was closed (>&-), and the export goes nowhere while it
				// exits 0. It cannot be told from a launcher's discarded output: a warning.
				fmt.Fprintln(c.io.err, "effectfence ledger export: warning: stdout is /dev/null open for reading and writing, as when stdout was closed at start (>&-): the export is written nowhere; to keep it, redirect stdout to a file (> FILE)")
			}
			var spill *spillWriter
			if needsSpill(c.io.out) {
				spill = newSpillWriter(c.io.out, "")
				c.io.out = spill
			}
			out := &checkedWriter{w: c.io.out}
			c.io.out = out
			err = run(ctx, c)
			if spill != nil {
				// run has closed the ledger: only the report's reader is waited for now.
				if serr := spill.Close(); out.err == nil {
					out.err = serr
				}
			}
			if out.err != nil {
				// A report that did not reach stdout (a full disk, a closed file) is not a
				// success: a script would read a truncated report, or none, as the answer.
				if name == "clear" || name == "resolve" || name == "sweep" {
					return fmt.Errorf("ledger %s took effect, but writing its report failed: %w", name, out.err)
				}
				return fmt.Errorf("ledger %s: writing the output failed: %w", name, out.err)
			}
			return err
		},
	}
}

// checkedWriter remembers the first error of its writes (fmt.Fprintf and the table writer
// drop them) and writes nothing after it.
type checkedWriter struct {
	w   io.Writer
	err error
}

func (cw *checkedWriter) Write(p []byte) (int, error) {
	if cw.err != nil {
		return 0, cw.err
	}
	n, err := cw.w.Write(p)
	cw.err = err
	return n, err
}

// emptyLedgerFlag is the usage error of an empty --ledger, what a script's unset variable
// gives (--ledger "$LEDGER"). Read as no --ledger, it meant EFFECTFENCE_LEDGER's ledger or the
// default one: a ledger command settled an intent of that one, and a wrap or serve fenced its
// calls in a ledger its peers do not share (TestEmptyLedgerFlagActsOnNoLedger,
// TestEmptyLedgerFlagStartsNoFence).
func emptyLedgerFlag(command string) error {
	return usageErr("%s: --ledger is empty: give the ledger's file path, memory or postgres:// URL (without --ledger, %s or the default ledger is used; nothing was opened)", command, store.EnvLedger)
}

func newLedgerCall(io streams, cmd *cli.Command, nargs int) (ledgerCall, error) {
	args := cmd.Args().Slice()
	if len(args) < nargs {
		return ledgerCall{}, usageErr("ledger %s: missing %s", cmd.Name, strings.TrimSuffix(cmd.ArgsUsage[:strings.Index(cmd.ArgsUsage, "[")], " "))
	}
	for _, a := range args[:nargs] {
		if strings.TrimSpace(a) == "" {
			return ledgerCall{}, usageErr("ledger %s: the intent is empty; give the intent id as `effectfence ledger ls` shows it", cmd.Name)
		}
	}
	if cmd.IsSet("ledger") && strings.TrimSpace(cmd.String("ledger")) == "" {
		// An empty --ledger is a script's unset variable (--ledger "$LEDGER"): read as no
		// --ledger, the command acted on EFFECTFENCE_LEDGER's or the default ledger, and a
		// clear or resolve settled an intent of that one (TestEmptyLedgerFlagActsOnNoLedger).
		return ledgerCall{}, emptyLedgerFlag("ledger " + cmd.Name)
	}
	for _, flag := range []string{"scope", "policy"} {
		if givenEmpty(cmd, flag) {
			return ledgerCall{}, emptyNameFlag("ledger "+cmd.Name, flag)
		}
	}
	name, forLedger, scopeName := "server", "", ""
	var before []store.Earlier
	if cmd.Bool("for") {
		child := args[nargs:]
		if len(child) == 0 {
			return ledgerCall{}, usageErr("ledger %s: --for needs the child command after --, e.g. --for -- npx -y @modelcontextprotocol/server-memory", cmd.Name)
		}
		if cmd.String("ledger") != "" {
			return ledgerCall{}, usageErr("ledger %s: give --ledger or --for, not both", cmd.Name)
		}
		// The same scope, so the same file, that `effectfence wrap [--scope NAME] [--policy
		// FILE] -- child` started from this directory and environment opens: the flags, then
		// EFFECTFENCE_LEDGER, then the policy's scope and ledger, as wrap folds them.
		path := cmd.String("policy")
		if path == "" {
			path = os.Getenv(envPolicy)
		}
		var pol *policy.Policy
		if path != "" {
			var err error
			if pol, err = policy.Load(path); err != nil {
				return ledgerCall{}, usageErr("ledger %s: %v", cmd.Name, policyLoadError(path, err))
			}
		}
		res := policy.Resolve(pol, policy.Flags{Scope: cmd.String("scope"), Ledger: os.Getenv(store.EnvLedger)})
		scope := store.CurrentWrapScope(child, res.Scope)
		name, forLedger, before, scopeName = scope.LedgerName(), res.Ledger, scope.Before, res.Scope
	} else if cmd.IsSet("scope") {
		return ledgerCall{}, usageErr("ledger %s: --scope names the scope of a wrap ledger and goes with --for -- <command…>", cmd.Name)
	} else if cmd.IsSet("policy") {
		return ledgerCall{}, usageErr("ledger %s: --policy names the scope and ledger of a wrap and goes with --for -- <command…>", cmd.Name)
	} else if len(args) > nargs {
		return ledgerCall{}, usageErr("ledger %s: unexpected argument %q (a child command goes after --for --)", cmd.Name, args[nargs])
	}
	opts, err := store.FromEnv(name)
	if err != nil {
		return ledgerCall{}, usageErr("%v", err)
	}
	if l := cmd.String("ledger"); l != "" {
		opts.Ledger = l
	} else if forLedger != "" {
		opts.Ledger = forLedger
	}
	// With --for and no --ledger: EFFECTFENCE_LEDGER when set (wrap opens that too), else the
	// policy's ledger, else the scope's default file.
	if opts.Ledger == "" && len(before) > 0 {
		// Under earlier builds the same launch had another scope (wrap says so at its start):
		// a call it left unknown is fenced in that file, not in the one shown here.
		if dir, err := store.StateDir(); err == nil {
			for _, b := range before {
				if old := filepath.Join(dir, b.Name+".db"); isFile(old) {
					fmt.Fprintf(io.err, "effectfence ledger: a ledger of this command from before %s (%s) exists at %s; it is not shown here; check it for calls left unknown: effectfence ledger ls --ledger %s\n", b.Until, earlierChange(b, ""), safetext.Escape(old), shellQuote(old))
				}
			}
		}
	}
	tty := isTerminal(io.out)
	wide := !tty || cmd.Bool("wide")
	return ledgerCall{io: io, opts: opts, scope: scopeName, args: args[:nargs], json: cmd.Bool("json"), cmd: cmd, out: newPainter(io.out), wide: wide, wideFlag: cmd.Bool("wide"), tty: tty}, nil
}

// open opens the ledger for a subcommand that reads or changes it through the engine. An
// operator's look must not create a ledger: a missing file, or a PostgreSQL schema that
// holds no ledger, is an error.
func (c ledgerCall) open(ctx context.Context) (*store.Ledger, error) {
	return c.openAs(ctx, false)
}

// openView opens the ledger for a look that changes nothing (ls, show, stats, export,
// verify). Where SQLite cannot write beside a SQLite ledger (a full disk, a read-only file
// system), which its every open does, and no process has the ledger open, it is read at
// rest (store.Options.AtRest), and the look says so on stderr: an operator whose disk filled
// up sees what is fenced, and copies the receipts off it.
func (c ledgerCall) openView(ctx context.Context) (*store.Ledger, error) {
	return c.openAs(ctx, true)
}

func (c ledgerCall) openAs(ctx context.Context, view bool) (*store.Ledger, error) {
	loc, err := c.opts.Location()
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if loc == "memory" {
		// A new memory ledger is empty: the look would report nothing fenced, whatever the
		// process that uses one (serve or wrap given memory) has fenced.
		return nil, fmt.Errorf("ledger memory: a memory ledger lives inside the one process that uses it (serve or wrap given --ledger memory or %s=memory) and ends with it; no other process can read or change it, so there is nothing here to show (restarting that process forgets every call it fenced; give it a file or a postgres:// ledger to reconcile its calls)", store.EnvLedger)
	}
	if !strings.Contains(loc, "://") {
		fi, err := os.Stat(loc)
		if errors.Is(err, os.ErrNotExist) || err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
			if problem, advice := sqlite.OrphanLog(loc); problem != "" {
				return nil, fmt.Errorf("ledger %s %s; %s", loc, problem, advice)
			}
			if err == nil {
				if err := sqlite.Emptied(loc); err != nil {
					return nil, err // a ledger was here: says so, and the ways out
				}
				// SQLite reads an empty file as an empty database: the look would make it a
				// ledger and report nothing fenced, whatever was (or was meant to be) there.
				return nil, fmt.Errorf("no ledger at %s: the file is empty (nothing has used it yet, or it was emptied; check --ledger, EFFECTFENCE_LEDGER or --for)", loc)
			}
			if c.cmd.Bool("for") && c.opts.Ledger == "" { // the scope's default file
				if c.scope != "" {
					// A named scope's file follows its name alone: neither the command, the
					// directory nor the environment has a part in it.
					return nil, fmt.Errorf("no ledger at %s: no wrap of scope %q has used it yet. %s", loc, c.scope, otherWrapLedgers(filepath.Dir(loc), loc, scopeLedgerWhy))
				}
				return nil, fmt.Errorf("no ledger at %s: no wrap of this command started from this directory and environment has used it yet. %s", loc, otherWrapLedgers(filepath.Dir(loc), loc, wrapLedgerWhy))
			}
			return nil, fmt.Errorf("no ledger at %s: nothing has used it yet (check --ledger, EFFECTFENCE_LEDGER or --for)", loc)
		}
	}
	opts := c.opts
	opts.Existing = true
	// Records expire when their writer said (each done record holds its expiry), but an
	// event's age is judged by the sweeping engine's result TTL: this command's is the
	// operator's environment (or the default), not that of the processes writing the ledger.
	opts.KeepEvents = true
	if view && loc != "memory" && !strings.Contains(loc, "://") {
		if why := sqlite.Unwritable(loc); why != "" {
			at := opts
			at.AtRest = true
			l, err := store.Open(ctx, at)
			if err == nil {
				c.readOnlyNote(l, why)
				return l, nil
			}
			if !errors.Is(err, sqlite.ErrNotAtRest) {
				return nil, fmt.Errorf("%w (read at rest, as %s)", err, why)
			}
			// A process has it open, with its index: SQLite's own open may read it.
		}
	}
	l, err := store.Open(ctx, opts)
	if err != nil && view {
		// The open was refused for want of writing beside the ledger, which no process holds:
		// the look reads it at rest, as on a full disk. Before, each view exited 1 and the
		// receipts could not be read until the disk was repaired or room was made.
		why := ""
		switch {
		case errors.Is(err, sqlite.ErrDiskFailsWrites):
			// Every open writes (the log copied into the file, Recover), and that failed.
			why = "its disk fails writes (copying its write-ahead log into the file failed with an I/O error; the kernel's log says, `dmesg`)"
		case !strings.Contains(loc, "://"):
			// A disk with a few pages left: the probe of Unwritable took its byte, but SQLite's
			// open found no room for the index and log it makes beside the ledger (and took
			// back what it made).
			why = sqlite.OpenUnwritable(loc, err)
		}
		if why != "" {
			at := opts
			at.AtRest = true
			if rl, rerr := store.Open(ctx, at); rerr == nil {
				c.readOnlyNote(rl, why)
				return rl, nil
			}
		}
	}
	return l, err
}

// readOnlyNote says on stderr that the look at l reads it at rest, and why.
func (c ledgerCall) readOnlyNote(l *store.Ledger, why string) {
	frames := ""
	if st, ok := l.Store().(*sqlite.Store); ok && st.AtRestFrames() > 0 {
		frames = fmt.Sprintf(" and the %d committed frames of its write-ahead log (left by a process that did not close it cleanly: killed, its machine down, or its close failed for want of room)", st.AtRestFrames())
	}
	asIs := " as it is"
	if frames != "" {
		asIs = " as they are"
	}
	fmt.Fprintf(c.io.err, "effectfence ledger: read-only: ledger %s: %s, so SQLite cannot open it as usual; no process has it open, and this look reads the file%s%s, writing nothing, beside it neither. Nothing was recovered or swept: a claim of a process that is gone shows as it left it (in_flight), until a process opens the ledger with room to write (ls, show and stats name each claim that open will take from its holder)\n", esc(l.Location), why, frames, asIs)
}

// outlivedClaims gathers, for a look that read the ledger at rest (nothing recovered at its
// open), the claims filed in_flight that the next open of the ledger takes from their holders
// (fence.Outlived: the holder gone, or the lease lapsed), to name them on stderr once the look
// is written, as check names them. The look shows them as filed, so that what it writes stays
// what a scan by state reads (ls --state in_flight lists them, as the ledger files them).
type outlivedClaims struct {
	on    bool
	notes []string
	more  int
}

func outlivedOf(l *store.Ledger) *outlivedClaims {
	st, ok := l.Store().(*sqlite.Store)
	return &outlivedClaims{on: ok && st.ReadAtRest()}
}

// see judges r by the ledger's clock now.
func (o *outlivedClaims) see(now time.Time, r *fence.Record) {
	if !o.on || r.State != fence.StateInFlight {
		return
	}
	why, freed := fence.Outlived(now, *r)
	if why == "" {
		return
	}
	if len(o.notes) == 20 {
		o.more++
		return
	}
	to := "marks it unknown (fenced)"
	if freed {
		to = "frees it for the next attempt"
	}
	o.notes = append(o.notes, fmt.Sprintf("the claim of intent %q is shown in_flight, as filed, but its %s: the next open of the ledger with room to write %s", r.Intent, why, to))
}

// say names the claims seen on w.
func (o *outlivedClaims) say(w io.Writer) {
	for _, n := range o.notes {
		fmt.Fprintln(w, "effectfence ledger: read-only: "+esc(n))
	}
	if o.more > 0 {
		fmt.Fprintf(w, "effectfence ledger: read-only: … and %d more claim(s) so\n", o.more)
	}
}

// stillRead says, after a look that read the ledger at rest, whether a process opened or
// changed it meanwhile (then what was shown may mix two states of the ledger: an error).
func stillRead(l *store.Ledger) error {
	if st, ok := l.Store().(*sqlite.Store); ok {
		if what := st.StillAtRest(); what != "" {
			return fmt.Errorf("ledger %s: %s: what was shown, read at rest, may mix its states before and after; run the command again", l.Location, what)
		}
	}
	return nil
}

// wrapLedgerWhy is why --for may not find the default ledger of a wrap without a scope name.
const wrapLedgerWhy = "Its name follows the command, the directory and the environment variables (hashed), and an MCP client starts wrap with its own environment, often not a shell's: the first line wrap logs, \"effectfence wrap: ledger PATH\", names the file (give it as --ledger PATH)"

// scopeLedgerWhy is why --for may not find the ledger of a wrap given a scope name.
const scopeLedgerWhy = "With a scope, the file follows its name alone: check the --scope wrap was given (or its policy's scope); the first line wrap logs, \"effectfence wrap: ledger PATH\", names the file (give it as --ledger PATH)"

// otherWrapLedgers says why (why) --for may not find the ledger of a wrap that ran, and names the
// other default wrap ledgers of dir, newest first: wrap's default ledger follows its scope,
// which hashes the environment it was started with, and an MCP client starts it with its own
// (often a few variables, where the operator's shell has dozens).
func otherWrapLedgers(dir, not, why string) string {
	// Matched by name, not filepath.Glob of dir: the directory may hold '[' or '*'
	// (TestOtherWrapLedgersInADirectoryWithGlobCharacters).
	var paths []string
	if entries, err := os.ReadDir(dir); err == nil {
		for _, de := range entries {
			if ok, _ := filepath.Match("wrap-*.db", de.Name()); ok {
				paths = append(paths, filepath.Join(dir, de.Name()))
			}
		}
	}
	type ledger struct {
		path string
		mod  time.Time
	}
	var found []ledger
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && p != not {
			l := ledger{p, fi.ModTime()}
			// A ledger's writes go to its -wal file until a checkpoint.
			if wal, err := os.Stat(p + "-wal"); err == nil && wal.ModTime().After(l.mod) {
				l.mod = wal.ModTime()
			}
			found = append(found, l)
		}
	}
	if len(found) == 0 {
		return why + "; no other wrap ledger is in " + dir
	}
	slices.SortFunc(found, func(a, b ledger) int { return b.mod.Compare(a.mod) })
	const most = 5
	var b strings.Builder
	fmt.Fprintf(&b, "%s; the wrap ledgers in %s, newest first:", why, dir)
	for i, l := range found {
		if i == most {
			fmt.Fprintf(&b, " and %d more", len(found)-most)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s (last written %s)", wrap.ShellJoin([]string{l.path}), l.mod.UTC().Format(time.RFC3339))
	}
	return b.String()
}

// writeJSON writes v as indented JSON, with the characters JSON allows raw that could act on
// a terminal (C1 controls, bidi overrides) escaped: same document, safe to print.
func (c ledgerCall) writeJSON(v any) error {
	enc := json.NewEncoder(jsonOut{c.io.out})
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jsonOut passes each write of a json.Encoder (one whole value per Write) through
// safetext.JSON.
type jsonOut struct{ w io.Writer }

func (j jsonOut) Write(p []byte) (int, error) {
	if _, err := j.w.Write(safetext.JSON(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// cell is one table cell of an id read from the ledger (an intent, a domain): escaped so that
// no two ids look alike (a backslash too: safetext.EscapeExact), and shortened to n characters
// (never inside an escape) only on a terminal without --wide.
func (c ledgerCall) cell(s string, n int) string {
	if c.wide {
		return safetext.EscapeExact(s)
	}
	return safetext.ClipExact(s, n)
}

// maxTextCell bounds a table cell of free text read from the ledger (a tool name, an agent,
// a reason, what verify found) outside a terminal, where ids are whole: a table pads every
// row to its widest cell, so one agent's megabyte of reason made `ledger ls` in a pipe write
// a megabyte per record (and three more for the rules). show and --json give such text whole,
// and so does --wide.
const maxTextCell = 1000

// text is a table cell of free text read from the ledger: escaped, shortened to n characters
// on a terminal and to maxTextCell elsewhere, whole with --wide.
func (c ledgerCall) text(s string, n int) string {
	switch {
	case c.wideFlag:
		return safetext.Escape(s)
	case c.wide: // not a terminal
		return safetext.Clip(s, maxTextCell)
	}
	return safetext.Clip(s, n)
}

// operatorText refuses text an operator gives a command to record (--reason, --ref, --result)
// that is not UTF-8: the ledger writes it as JSON, which would keep each invalid byte as
// U+FFFD, so the audit trail would hold other text than the command said it recorded.
func operatorText(sub, flag, s string) error {
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && w == 1 {
			return usageErr("ledger %s: --%s is not valid UTF-8 (byte \\x%02x at offset %d): the ledger records text as UTF-8 and would keep another text than this; give it in UTF-8", sub, flag, s[i], i)
		}
		i += w
	}
	return nil
}

// esc is text read from the ledger, escaped for the terminal.
func esc(s string) string { return safetext.Escape(s) }

// escID is an id read from the ledger, escaped for the terminal so that no two look alike.
func escID(s string) string { return safetext.EscapeExact(s) }

// painter colours text only on a terminal and never with NO_COLOR (colourFor).
type painter struct{ on bool }

func newPainter(w io.Writer) painter { return painter{on: colourFor(w)} }

func (p painter) paint(s string, attrs ...color.Attribute) string {
	if !p.on {
		return s
	}
	c := color.New(attrs...)
	c.EnableColor()
	return c.Sprint(s)
}

// state is a record's state, coloured by what it means; any other text escaped.
func (p painter) state(s fence.State) string {
	switch s {
	case fence.StateDone:
		return p.paint(string(s), color.FgGreen)
	case fence.StateInFlight:
		return p.paint(string(s), color.FgYellow)
	case fence.StateFailed, fence.StateUnknown:
		return p.paint(string(s), color.FgRed, color.Bold)
	}
	// No state the engine writes: a record edited by hand (or damaged) that still decodes.
	// It is text read from the ledger, shown escaped like the rest.
	return esc(string(s))
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

func ledgerLs(ctx context.Context, c ledgerCall) error {
	var states []fence.State
	for _, s := range c.cmd.StringSlice("state") {
		for part := range strings.SplitSeq(s, ",") {
			st, err := ledger.ParseState(strings.TrimSpace(part))
			if err != nil {
				return usageErr("ledger ls: %v", err)
			}
			states = append(states, st...)
		}
	}
	l, err := c.openView(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	// ls holds one record at a time, however many the ledger has (a day of a busy fleet's
	// calls is millions): the JSON is written record by record, and the table in two passes
	// over the one snapshot, the first measuring its columns (docs/DECISIONS.md).
	w := bufio.NewWriterSize(c.io.out, 64<<10)
	outlived := outlivedOf(l)
	if c.json {
		err = c.lsJSON(ctx, l, states, w, outlived)
	} else {
		err = c.lsTable(ctx, l, states, w, outlived)
	}
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if err == nil {
		outlived.say(c.io.err)
		err = stillRead(l)
	}
	return err
}

// lsHeader is the header of the `ledger ls` table.
var lsHeader = []string{"intent", "state", "tool", "agent", "domain/seq", "updated", "lease until / expires", "reason"}

// lsRow is the row of the `ledger ls` table that shows r, read when the ledger's clock said
// now (its lease is judged by that clock, as clear judges it).
func (c ledgerCall) lsRow(now time.Time, r *fence.Record) []string {
	dom := ""
	if r.Domain != "" {
		dom = fmt.Sprintf("%s/%d", c.cell(r.Domain, 40), r.Seq)
	}
	until := r.LeaseUntil
	if r.State == fence.StateDone {
		until = r.ExpiresAt
	}
	if r.State.Fenced() && !leaseHolds(now, r) {
		until = time.Time{}
	}
	return []string{c.cell(r.Intent, 60), c.out.state(r.State), c.text(r.Tool, 30), c.text(r.Agent, 20), dom, stamp(r.UpdatedAt), stamp(until), c.text(r.Reason, 60)}
}

// leaseHolds reports whether r is a fenced claim whose lease still runs (unknown only because
// its holder looked gone, so it can still heal): until the lease lapses, `clear` and `resolve
// --did-not-happen` are refused (fence.Engine.ClearUnlessHeld), so ls and show give its lease.
func leaseHolds(now time.Time, r *fence.Record) bool {
	_, holds := fence.LeaseHolds(now, *r)
	return holds && r.State.Fenced()
}

// lsTable writes the `ledger ls` table in two passes over the same records (one read
// transaction, one snapshot): the first counts the records and measures the columns, the
// second writes the rows. It holds a row at a time.
func (c ledgerCall) lsTable(ctx context.Context, l *store.Ledger, states []fence.State, w io.Writer, outlived *outlivedClaims) error {
	t := newStreamTable(lsHeader...)
	n, shown := 0, 0
	var bad *unreadableList
	// The ledger's clock as the read began (the database's, on PostgreSQL), which leases run
	// by: judged by this host's clock, a lease was shown lapsed that clear still refused, or
	// running when clear went through (TestLedgerViewsJudgeTheLeaseByTheLedgersClock).
	var now time.Time
	count, clearCount := c.count("ls: records")
	measure := ledger.Pass{
		Start: func(at time.Time) error { now = at; return nil },
		Record: func(r *fence.Record) error {
			n++
			count()
			t.measure(c.lsRow(now, r)...)
			outlived.see(now, r)
			return nil
		},
		End: func(unreadable error) error {
			clearCount() // before anything more is said on stderr
			var err error
			if bad, err = c.unreadable(l, unreadable); err != nil {
				return err
			}
			count, clearCount = c.count("ls: rows written")
			fmt.Fprintf(w, "ledger %s: %d intent(s)\n", esc(l.Location), n)
			if n == 0 {
				return nil
			}
			return t.head(w)
		},
	}
	write := ledger.Pass{
		Record: func(r *fence.Record) error {
			shown++
			count()
			return t.row(w, c.lsRow(now, r)...)
		},
		End: func(error) error {
			clearCount()
			if shown != n {
				// A store whose read transaction is not one snapshot: the table would be
				// misaligned, or miss records, without a word.
				return fmt.Errorf("the ledger read %d record(s), then %d, in one read transaction", n, shown)
			}
			if n == 0 {
				return nil
			}
			return t.foot(w)
		},
	}
	err := ledger.Walk(ctx, l.Store(), states, measure, write)
	clearCount()
	var u *ledger.UnreadableRecords
	if errors.As(err, &u) && bad != nil {
		err = nil // named on stderr after the first pass; bad.exit() below
	}
	if err != nil && shown > 0 {
		// What was written is a table cut short, or whole rows of one: say it is not the list.
		return fmt.Errorf("ledger ls is incomplete: it failed after %d of %d row(s); list again: %w", shown, n, err)
	}
	if err != nil {
		return err
	}
	return bad.exit()
}

// lsJSON writes `ledger ls --json` record by record: the document a json.Encoder would write
// (indented, HTML characters raw, C1 and bidi characters escaped by safetext.JSON) for
// {"ledger": …, "records": […], "unreadable": […]}, byte for byte, without holding the records
// (TestLedgerLsJSONMatchesTheDocument).
func (c ledgerCall) lsJSON(ctx context.Context, l *store.Ledger, states []fence.State, w io.Writer, outlived *outlivedClaims) error {
	var buf bytes.Buffer
	// piece writes v as the Encoder writes a value nested at the depth of prefix, after before.
	piece := func(before, prefix string, v any) error {
		buf.Reset()
		buf.WriteString(before)
		enc := json.NewEncoder(&buf)
		enc.SetIndent(prefix, "  ")
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1) // the Encoder's newline
		_, err := w.Write(safetext.JSON(buf.Bytes()))
		return err
	}
	n := 0
	head := func() error { return piece("{\n  \"ledger\": ", "  ", l.Location) }
	count, clearCount := c.count("ls: records")
	var now time.Time
	err := ledger.Walk(ctx, l.Store(), states, ledger.Pass{Start: func(at time.Time) error { now = at; return nil }, Record: func(r *fence.Record) error {
		outlived.see(now, r)
		if n == 0 {
			if err := head(); err != nil {
				return err
			}
		}
		before := ",\n    "
		if n == 0 {
			before = ",\n  \"records\": [\n    "
		}
		n++
		count()
		return piece(before, "    ", r)
	}})
	clearCount() // before anything more is said on stderr
	bad, err := c.unreadable(l, err)
	if err != nil && n > 0 {
		// What was written is the start of a document: say it is not the list.
		return fmt.Errorf("ledger ls is incomplete: it failed after %d record(s); list again: %w", n, err)
	}
	if err != nil {
		return err
	}
	end := "\n  ]"
	if n == 0 {
		if err := head(); err != nil {
			return err
		}
		end = ",\n  \"records\": []"
	}
	if bad != nil {
		if err := piece(end+",\n  \"unreadable\": ", "  ", unreadableJSON(bad)); err != nil {
			return err
		}
		end = ""
	}
	if _, err := io.WriteString(w, end+"\n}\n"); err != nil {
		return err
	}
	return bad.exit()
}

// count is counter(what), with add and clear doing nothing when no count is drawn.
func (c ledgerCall) count(what string) (add, clear func()) {
	if add, clear, ok := c.counter(what); ok {
		return add, clear
	}
	return func() {}, func() {}
}

// unreadableList is what a view (ls, export, stats, show) could not read: it shows the rest,
// names each of these on stderr and exits 1, so that a script notices.
type unreadableList struct {
	loc  string
	recs []*fence.UnreadableError
	evs  []*fence.UnreadableEventError
}

// unreadable splits a view's error: records and audit events it could not read (named on
// stderr now, the view's exit for later) from a failure of the view.
func (c ledgerCall) unreadable(l *store.Ledger, err error) (*unreadableList, error) {
	var u *ledger.UnreadableRecords
	if !errors.As(err, &u) {
		return nil, err
	}
	for _, r := range u.Records {
		fmt.Fprintf(c.io.err, "effectfence: unreadable record, left out: %s\n", esc(r.Error()))
	}
	for _, e := range u.Events {
		fmt.Fprintf(c.io.err, "effectfence: unreadable audit event, left out: %s\n", esc(e.Error()))
	}
	return &unreadableList{loc: l.Location, recs: u.Records, evs: u.Events}, nil
}

// exit is the view's error: none when every record and event was read.
func (u *unreadableList) exit() error {
	if u == nil {
		return nil
	}
	var what []string
	if len(u.recs) > 0 {
		what = append(what, fmt.Sprintf("%d record(s)", len(u.recs)))
	}
	if len(u.evs) > 0 {
		what = append(what, fmt.Sprintf("%d audit event(s)", len(u.evs)))
	}
	return exitCoder{exitError, fmt.Errorf("ledger %s: %s could not be read and are left out (named above); the rest is shown", u.loc, strings.Join(what, " and "))}
}

// unreadableJSON lists what a view left out under "unreadable": each record by its intent,
// each audit event by its intent and its row's id ("event").
func unreadableJSON(u *unreadableList) []map[string]any {
	out := make([]map[string]any, 0, len(u.recs)+len(u.evs))
	for _, r := range u.recs {
		out = append(out, map[string]any{"intent": r.Intent, "error": r.Error()})
	}
	for _, e := range u.evs {
		out = append(out, map[string]any{"intent": e.Intent, "event": e.ID, "error": e.Error()})
	}
	return out
}

func ledgerShow(ctx context.Context, c ledgerCall) error {
	last := c.cmd.Int("events")
	if last < 0 { // before the ledger is opened (an open recovers and sweeps)
		return usageErr("ledger show: --events %d: give how many of the last audit events to show, or 0 for every one", last)
	}
	l, err := c.openView(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	d, err := ledger.ShowLast(ctx, l.Store(), c.args[0], last)
	bad, err := c.unreadable(l, err) // audit events it could not read: named now, exit 1 below
	if err != nil {
		return err
	}
	if err := c.showDetail(ctx, l, d, bad); err != nil {
		return err
	}
	outlived := outlivedOf(l)
	outlived.see(d.Now, &d.Record)
	outlived.say(c.io.err)
	if err := stillRead(l); err != nil {
		return err
	}
	return bad.exit()
}

// showDetail writes what ledger show shows of d; bad is what of its audit trail could not be
// read (named on stderr already), or nil.
func (c ledgerCall) showDetail(ctx context.Context, l *store.Ledger, d ledger.Detail, bad *unreadableList) error {
	if d.Record.State == fence.StateNone && len(d.Events) == 0 && bad == nil {
		return fmt.Errorf("ledger %s holds no intent %q and no audit event about it%s", l.Location, c.args[0], notFoundHint(ctx, l.Store(), c.args[0], "ls"))
	}
	if c.json {
		if bad != nil {
			// As ls --json and stats --json list what they left out: before, show --json
			// named its unreadable events on stderr only (TestUnreadableEventDoesNotHideTheRest).
			return c.writeJSON(struct {
				ledger.Detail
				Unreadable []map[string]any `json:"unreadable"`
			}{d, unreadableJSON(bad)})
		}
		return c.writeJSON(d)
	}
	r := d.Record
	w := c.io.out
	fmt.Fprintf(w, "intent   %s\nstate    %s\n", escID(r.Intent), c.out.state(r.State))
	if r.State != fence.StateNone {
		fmt.Fprintf(w, "tool     %s\nargs     %s\nagent    %s\nowner    %s\ntoken    %d\n", esc(r.Tool), esc(string(r.Args)), esc(r.Agent), esc(r.Owner), r.Token)
		if r.Domain != "" {
			fmt.Fprintf(w, "domain   %s seq %d\n", escID(r.Domain), r.Seq)
		}
		fmt.Fprintf(w, "claimed  %s\nupdated  %s\n", stamp(r.ClaimedAt), stamp(r.UpdatedAt))
		// Judged by the ledger's clock (the database's, on PostgreSQL), as clear and resolve
		// judge it: by this host's, show offered --did-not-happen as a command that would go
		// through while clear was refused (TestLedgerViewsJudgeTheLeaseByTheLedgersClock).
		now := d.Now
		leaseRuns := leaseHolds(now, &r)
		if r.State == fence.StateInFlight || leaseRuns {
			fmt.Fprintf(w, "lease    until %s\n", stamp(r.LeaseUntil))
		}
		if !r.ExpiresAt.IsZero() {
			fmt.Fprintf(w, "expires  %s\n", stamp(r.ExpiresAt))
		}
		if r.Reason != "" {
			fmt.Fprintf(w, "reason   %s\n", esc(r.Reason))
		}
		if r.Cert != nil {
			fmt.Fprintf(w, "cert     %s\nresult   %s\n", esc(r.Cert.Hash), esc(string(r.Cert.Result)))
			if r.Cert.Parent != "" {
				fmt.Fprintf(w, "parent   %s\n", esc(r.Cert.Parent))
			}
		}
		_, silent := l.SilentHolder(now, r)
		g, runs := fence.CarrierRuns(r.Owner)
		if silent && runs && r.State.Fenced() {
			// As clear judges it (SilentHolder): a failed claim is cleared whatever its carrier
			// does (its server answered it).
			fmt.Fprintf(w, "\nfenced, but process group %d, which its holder (process %s) started to run the call, still runs on this host (without that holder, without its own leader, or as the server of a task its holder stopped following): it may still finish the effect.\nStop that group (kill -KILL -- -%d) or wait until it has ended. Until then `resolve --did-not-happen` and `clear` are refused; if you find the effect in the real system:\n  %s\n", g, esc(r.Owner), g, intentCommand("resolve", r.Intent, c.selection(l.Location)+fence.ClaimFlag(r.Token), ` --happened --reason "what you found"`))
		} else if silent && r.State.Fenced() {
			fmt.Fprintf(w, "\nfenced, but its holder (process %s) still runs on this host past its lease: stopped or stalled, it may still run or finish the effect.\nStop that process, or let it resume: its late result settles the intent. Until then `resolve --did-not-happen` and `clear` are refused; if you find the effect in the real system:\n  %s\n", esc(fence.HolderHere(r.Owner)), intentCommand("resolve", r.Intent, c.selection(l.Location)+fence.ClaimFlag(r.Token), ` --happened --reason "what you found"`))
		} else if leaseRuns {
			sel := c.selection(l.Location) + fence.ClaimFlag(r.Token)
			fmt.Fprintf(w, "\nfenced, but the lease of claim %d runs until %s: whoever holds its ticket (a process its holder started, the agent of a serve claim) may still run or finish the effect, even with its holder process gone.\nUntil then `resolve --did-not-happen` and `clear` are refused (`clear --force` frees it anyway, if you know the effect is not running). Check the real system, then one of\n  %s        # it took effect: duplicates get a recorded result\n  %s  # it did not: after %s; the next attempt runs\n",
				r.Token, stamp(r.LeaseUntil), intentCommand("resolve", r.Intent, sel, ` --happened --reason "what you found"`), intentCommand("resolve", r.Intent, sel, ` --did-not-happen --reason "what you found"`), stamp(r.LeaseUntil))
		} else if r.State.Fenced() {
			sel := c.selection(l.Location) + fence.ClaimFlag(r.Token)
			fmt.Fprintf(w, "\nfenced: check in the real system whether the effect happened, then one of\n  %s        # it took effect: duplicates get a recorded result\n  %s  # it did not: the next attempt runs\n",
				intentCommand("resolve", r.Intent, sel, ` --happened --reason "what you found"`), intentCommand("resolve", r.Intent, sel, ` --did-not-happen --reason "what you found"`))
		}
		if r.State.Fenced() || leaseRuns {
			fmt.Fprint(w, c.passwordNote())
		}
	}
	if len(d.Events) > 0 {
		if d.EventsLeftOut > 0 {
			fmt.Fprintf(w, "\naudit trail (the last %d of %d events; %d older left out: --events 0 shows every one):\n", len(d.Events), len(d.Events)+d.EventsLeftOut, d.EventsLeftOut)
		} else {
			fmt.Fprintln(w, "\naudit trail:")
		}
		t := tablewriter.NewTable(w)
		t.Header("at", "event", "state before", "who", "reason")
		for _, ev := range d.Events {
			if err := t.Append(stamp(ev.At), esc(ev.Kind), esc(string(ev.State)), esc(ev.Who), esc(ev.Reason)); err != nil {
				return err
			}
		}
		return t.Render()
	}
	return nil
}

// showEvents is how many of an intent's last audit events `ledger show` shows by default: an
// intent retried or cleared without end (a loop of an agent) can have millions, which the
// table would print whole, and the latest are the ones a reconciliation needs.
const showEvents = 50

// selection is what a command that show suggests needs to reach the ledger at loc (as
// Ledger.Location shows it): nothing when the ledger came from the environment or is the
// default (the same shell reaches it again), else --ledger with its absolute path, or with
// its URL as shown (a password replaced: put it back).
func (c ledgerCall) selection(loc string) string {
	if !c.cmd.IsSet("ledger") && !c.cmd.Bool("for") {
		return ""
	}
	if !strings.Contains(loc, "://") {
		if abs, err := filepath.Abs(loc); err == nil {
			loc = abs
		}
	}
	return " --ledger " + shellQuote(loc)
}

// passwordNote is the line under the commands show suggests when their --ledger is a
// PostgreSQL URL given with a password, which they show as xxxxx: pasted as it is, the command
// would fail to log in. The URL is the one opened: --ledger's, or with --for
// EFFECTFENCE_LEDGER's or a policy's (the note looked only at --ledger, which --for excludes).
func (c ledgerCall) passwordNote() string {
	raw := c.opts.Ledger
	if c.selection(raw) == "" || !strings.Contains(raw, "://") || postgres.Redact(raw) == raw {
		return ""
	}
	return "  (the URL's password is written xxxxx: put the password back before you run the command)\n"
}

// claimFlag is --claim of `ledger clear` and `ledger resolve`: the commands that show and
// wrap suggest carry it, so that run after the intent was cleared and claimed again they are
// refused, not carried out on the new attempt.
func claimFlag() cli.Flag {
	return &cli.Uint64Flag{Name: "claim", Usage: "act only if the intent is still held by the claim whose `TOKEN` this is (ledger show's token): refused, nothing changed, if it was cleared or resolved and claimed again since (the commands show and wrap suggest give it)"}
}

// claim is --claim of sub (0 when not given).
func (c ledgerCall) claim(sub string) (uint64, error) {
	if !c.cmd.IsSet("claim") {
		return 0, nil
	}
	n := c.cmd.Uint64("claim")
	if n == 0 || n == fence.PendingToken {
		return 0, usageErr("ledger %s: --claim %d names no claim: give the token `ledger show` gives", sub, n)
	}
	return n, nil
}

// otherClaim is the refusal of a clear or resolve whose --claim no longer holds the intent,
// or nil when err is not one.
func (c ledgerCall) otherClaim(err error, loc string) error {
	var nf fence.NotFencedError
	if !errors.As(err, &nf) || nf.Reclaimed == 0 {
		return nil
	}
	return fmt.Errorf("ledger %s: %v. Look at the claim that holds it before you settle it: %s", loc, err, intentCommand("show", c.args[0], c.selection(loc), ""))
}

// intentCommand is the command line `effectfence ledger SUB INTENT` with flags (each after a
// space) that reaches the ledger sel names (selection). An intent is the agent's text and may
// begin with '-': it then goes last, after "--", since where the command reads its flags it
// would be read as one (and the command would have no intent).
func intentCommand(sub, intent, sel, flags string) string {
	if strings.HasPrefix(intent, "-") {
		return "effectfence ledger " + sub + sel + flags + " -- " + shellQuote(intent)
	}
	return "effectfence ledger " + sub + " " + shellQuote(intent) + sel + flags
}

// notFoundHint ends the refusal of an intent the ledger does not hold. ls shows an intent's
// control and invisible characters escaped and its backslashes doubled (safetext.EscapeExact),
// so an intent copied from it is not the intent: when arg is how ls shows one the ledger holds,
// the hint names that intent in the $'…' form that pastes into bash or zsh. Before 2026-12-06
// the refusal sent the operator back to ls, where the copy came from, and such an intent could
// not be shown, cleared or resolved by what ls showed
// (TestIntentCopiedFromLsIsNamedInItsQuotedForm).
func notFoundHint(ctx context.Context, st fence.Store, arg, ls string) string {
	see := " (see `effectfence ledger " + ls + "`)"
	id, ok := unescapeShown(arg)
	if !ok {
		return see
	}
	if d, err := ledger.ShowLast(ctx, st, id, 1); err != nil || d.Record.State == fence.StateNone && len(d.Events) == 0 {
		return see
	}
	return "; `effectfence ledger ls` shows an intent's control and invisible characters escaped and its backslashes doubled, and it holds the intent shown that way: give it as " + shellQuote(id)
}

// unescapeShown reverses safetext.EscapeExact: it returns the text s shows, and whether s
// holds an escape at all and only escapes EscapeExact writes (\\, \n, \r, \t, \xHH, \uHHHH,
// \UHHHHHHHH).
func unescapeShown(s string) (string, bool) {
	if !strings.Contains(s, `\`) {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", false
		}
		digits := 0
		switch s[i+1] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'x':
			digits = 2
		case 'u':
			digits = 4
		case 'U':
			digits = 8
		default:
			return "", false
		}
		if digits == 0 {
			i++
			continue
		}
		if i+2+digits > len(s) {
			return "", false
		}
		v, err := strconv.ParseUint(s[i+2:i+2+digits], 16, 32)
		switch {
		case err != nil:
			return "", false
		case digits == 2:
			b.WriteByte(byte(v)) // a control character, or a byte that is not UTF-8
		case !utf8.ValidRune(rune(v)):
			return "", false
		default:
			b.WriteRune(rune(v))
		}
		i += 1 + digits
	}
	return b.String(), true
}

// shellQuote quotes s for a POSIX shell. A string with characters that could act on a
// terminal is written in the $'…' form of bash and zsh, with those characters escaped, so the
// command is both safe to print and right to paste.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == ':' || r == '.' || r == '/' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	if safetext.Escape(s) != s {
		return "$'" + safetext.Escape(strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s)) + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func ledgerClear(ctx context.Context, c ledgerCall) error {
	reason := strings.TrimSpace(c.cmd.String("reason"))
	if reason == "" {
		return usageErr("ledger clear: --reason is required: say what you checked in the real system (it is recorded with who you are)")
	}
	if err := operatorText("clear", "reason", reason); err != nil {
		return err
	}
	claim, err := c.claim("clear")
	if err != nil {
		return err
	}
	l, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	who := ledger.Operator()
	prev, err := l.ClearClaim(ctx, c.args[0], claim, who, reason, c.cmd.Bool("force"))
	var before fence.SettledBeforeError
	if errors.As(err, &before) {
		// The retry of a clear that landed, its answer lost: done, and said so (before
		// 2026-12-07 it was told the ledger holds no such intent, exit 1).
		return c.settledBefore("clear", before, l.Location)
	}
	if errors.Is(err, fence.ErrNotFound) {
		return fmt.Errorf("ledger %s holds no intent %q; nothing cleared%s", l.Location, c.args[0], notFoundHint(ctx, l.Store(), c.args[0], "ls"))
	}
	if err := c.otherClaim(err, l.Location); err != nil {
		return err
	}
	if nf := (fence.NotFencedError{}); errors.As(err, &nf) && nf.State == fence.StateDone {
		return fmt.Errorf("ledger %s: %v (--force clears it anyway, if you mean the next attempt to run the effect again)", l.Location, err)
	}
	if errors.Is(err, fence.ErrNotFenced) {
		return fmt.Errorf("ledger %s: %v (--force clears it anyway, if you know the effect is not running)", l.Location, err)
	}
	var unknown postgres.CommitUnknownError
	if errors.As(err, &unknown) {
		// The clear reached the database and its answer did not: neither a failure nor a
		// success can be told. Clearing again blind is no way out: if this clear landed, the
		// next attempt may have claimed the intent since, and a second clear would free that.
		return fmt.Errorf("ledger clear: the outcome is unknown: %q may or may not be cleared: the connection to ledger %s was lost after the clear was sent to commit, and the database could not be asked whether it committed. Once it answers, look: %s — no record and a clear event by %s means it was cleared (do not clear again); the record as before means it was not. To retry, name the claim, so that the retry tells you if the clear landed and never clears a new attempt: %s: %w",
			c.args[0], l.Location, intentCommand("show", c.args[0], c.selection(l.Location), ""), who, retryCommand("clear", c.args[0], c.selection(l.Location), prev.Token, c.cmd.Bool("force"), reason), err)
	}
	var lost postgres.ConnLostError
	if errors.As(err, &lost) {
		return fmt.Errorf("ledger clear: %q was not cleared (the connection to ledger %s was lost before the clear committed; nothing was recorded): %w", c.args[0], l.Location, err)
	}
	if err != nil {
		return err
	}
	if c.json {
		return c.writeJSON(map[string]any{"cleared": prev.Intent, "previous_state": prev.State, "who": who, "reason": reason, "ledger": l.Location})
	}
	// The ledger named, as --json names it: an operator with several ledgers (a wrap's per
	// server, serve's, a PostgreSQL one) sees which one was changed.
	fmt.Fprintf(c.io.out, "cleared %s (was %s) in ledger %s by %s: %s\nthe next attempt of this intent runs the effect.\n", escID(prev.Intent), c.out.state(prev.State), esc(l.Location), esc(who), esc(reason))
	return nil
}

// settledBefore is the answer of a clear or resolve (sub) whose work the audit trail shows done
// already (a retry of one whose answer was lost): done, exit 0, with the event that did it.
func (c ledgerCall) settledBefore(sub string, b fence.SettledBeforeError, loc string) error {
	if c.json {
		return c.writeJSON(map[string]any{"already": b.Event.Kind, "intent": b.Intent, "claim": b.Event.Token, "by_this_operator": b.Mine, "who": b.Event.Who, "reason": b.Event.Reason, "at": b.Event.At.UTC(), "ledger": loc})
	}
	by := "an earlier request"
	if b.Mine {
		by = "your earlier attempt (its answer was lost)"
	}
	what := b.Done()
	fmt.Fprintf(c.io.out, "already %s: claim %d of %s was %s by %s, in ledger %s: the audit trail holds its %s event by %s at %s: %s\nnothing more to do; this %s changed nothing.\n",
		what, b.Event.Token, escID(b.Intent), what, by, esc(loc), b.Event.Kind, esc(b.Event.Who), stamp(b.Event.At), esc(b.Event.Reason), sub)
	return nil
}

// retryCommand is the command line that retries a clear or resolve (sub, with its answer's
// flags) of claim token, the reason quoted.
func retryCommand(sub, intent, sel string, token uint64, force bool, reason string, more ...string) string {
	flags := ""
	if token != 0 {
		flags = fmt.Sprintf(" --claim %d", token)
	}
	if force {
		flags += " --force"
	}
	for _, m := range more {
		flags += " " + m
	}
	return intentCommand(sub, intent, sel, flags+" --reason "+shellQuote(reason))
}

func ledgerVerify(ctx context.Context, c ledgerCall) error {
	var rep ledger.VerifyReport
	var where string
	if c.cmd.IsSet("export") {
		if c.cmd.IsSet("ledger") || c.cmd.Bool("for") {
			return usageErr("ledger verify: give --export FILE or a ledger (--ledger, --for), not both")
		}
		path := c.cmd.String("export")
		in := c.io.in
		where = "export from stdin"
		if path != "-" {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			in, where = f, "export "+path
		}
		var err error
		if rep, err = ledger.VerifyExport(bufio.NewReaderSize(in, 1<<20)); err != nil {
			return fmt.Errorf("ledger verify: reading the %s: %w", where, err)
		}
	} else {
		l, err := c.openView(ctx)
		if err != nil {
			return err
		}
		defer l.Close()
		st, done := c.progress(l.Store(), "verify")
		rep, err = ledger.Verify(ctx, st)
		done()
		if err != nil {
			return err
		}
		if err := stillRead(l); err != nil {
			return err
		}
		where = "ledger " + l.Location
	}
	if c.json {
		if err := c.writeJSON(rep); err != nil {
			return err
		}
	} else {
		w := c.io.out
		events := ""
		if c.cmd.IsSet("export") {
			events = fmt.Sprintf(", %d event(s)", rep.Events)
		}
		fmt.Fprintf(w, "%s: %d record(s)%s, %d cert(s), %d verified; %d with a parent, %d linked, %d unresolved\n",
			esc(where), rep.Records, events, rep.Certs, rep.Verified, rep.Parents, rep.Linked, len(rep.Unresolved))
		for _, list := range []struct {
			title string
			ps    []ledger.Problem
		}{{c.out.paint("problems", color.FgRed, color.Bold), rep.Problems}, {"unresolved parents (not an error)", rep.Unresolved}} {
			if len(list.ps) == 0 {
				continue
			}
			fmt.Fprintf(w, "\n%s:\n", list.title)
			t := tablewriter.NewTable(w)
			t.Header("intent", "cert", "what")
			for _, p := range list.ps {
				if err := t.Append(c.cell(p.Intent, 50), c.text(p.Hash, 16), c.text(p.What, maxTextCell)); err != nil {
					return err
				}
			}
			if err := t.Render(); err != nil {
				return err
			}
		}
		if rep.OK() {
			fmt.Fprintln(w, c.out.paint("all certs verify", color.FgGreen))
		}
	}
	if !rep.OK() {
		return exitCoder{exitError, fmt.Errorf("verify found %d problem(s) in %s", len(rep.Problems), where)}
	}
	return nil
}

func ledgerExport(ctx context.Context, c ledgerCall) error {
	if f := c.cmd.String("format"); f != "jsonl" {
		return usageErr("ledger export: unknown --format %q (jsonl is the format)", f)
	}
	l, err := c.openView(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	var w io.Writer = jsonOut{c.io.out}
	clearCount := func() {}
	if add, clear, ok := c.counter("export: lines"); ok {
		// A big ledger takes seconds to export to a file or a pipe: count the lines.
		w, clearCount = lineCounter{w, add}, clear
	}
	n, err := ledger.Export(ctx, l.Store(), w)
	clearCount() // before anything more is said on stderr
	bad, err := c.unreadable(l, err)
	if err != nil && n > 0 {
		// What was written is whole lines, and reads like a (smaller) ledger: say it is not.
		return fmt.Errorf("ledger export is incomplete: it failed after %d whole line(s); export again: %w", n, err)
	}
	if err != nil {
		return err
	}
	return bad.exit()
}

// progress gives a view (verify, stats; ls counts in its own passes) the store st with a
// count of the records it has read drawn on stderr when stderr is a terminal (a big ledger
// takes seconds to read), and done, which clears the count: call it before anything more is
// written. The count is never
// on stdout. As for export, not when the report itself goes to the terminal: drawing and
// clearing the count writes carriage returns among the report's lines there, the very
// character the views escape in what they show so that nothing can be drawn over a line.
func (c ledgerCall) progress(st fence.Store, sub string) (fence.Store, func()) {
	add, clear, ok := c.counter(sub + ": records")
	if !ok {
		return st, func() {}
	}
	return countingStore{st, add}, clear
}

// counter draws a count of what on stderr when stderr is a terminal and the command's own
// output (stdout) is not; add counts one more, clear takes the count away. ok is false, and
// nothing is drawn, otherwise.
func (c ledgerCall) counter(what string) (add, clear func(), ok bool) {
	if !isTerminal(c.io.err) || c.tty {
		return nil, nil, false
	}
	// No spinner interval: with one, a bar of unknown length redraws itself from a goroutine
	// of its own every 100 ms, which races with Clear (unlocked in progressbar) and draws the
	// count again after it was cleared, among the report. Without it, the bar is drawn only
	// by add, on the caller's goroutine, so clear is the last thing it writes.
	bar := progressbar.NewOptions(-1, progressbar.OptionSetWriter(c.io.err), progressbar.OptionSetDescription("effectfence ledger "+what),
		progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetSpinnerChangeInterval(0))
	return func() { _ = bar.Add(1) }, func() { _ = bar.Exit(); _ = bar.Clear() }, true
}

// countingStore is a store whose views' Scans call record once per record they deliver.
type countingStore struct {
	fence.Store
	record func()
}

func (s countingStore) View(ctx context.Context, fn func(fence.Tx) error) error {
	return s.Store.View(ctx, func(tx fence.Tx) error { return fn(countingTx{tx, s.record}) })
}

type countingTx struct {
	fence.Tx
	record func()
}

func (t countingTx) Scan(f fence.Filter, fn func(*fence.Record) bool) error {
	if u := f.Unreadable; u != nil {
		f.Unreadable = func(e *fence.UnreadableError) { t.record(); u(e) }
	}
	return t.Tx.Scan(f, func(r *fence.Record) bool { t.record(); return fn(r) })
}

// Filing is the store's own (fence.Filing), which embedding the interface fence.Tx hides:
// without it verify, counting on a terminal, compared no record with what it is filed under.
// A store that files records under nothing of their own has no filing to give.
func (t countingTx) Filing(fn func(intent string, state fence.State, certHash string) bool) error {
	if f, ok := t.Tx.(fence.Filing); ok {
		return f.Filing(fn)
	}
	return nil
}

// lineCounter calls line after each write (a json.Encoder writes one whole line per write).
type lineCounter struct {
	w    io.Writer
	line func()
}

func (lc lineCounter) Write(p []byte) (int, error) {
	n, err := lc.w.Write(p)
	if err == nil {
		lc.line()
	}
	return n, err
}

func ledgerStats(ctx context.Context, c ledgerCall) error {
	l, err := c.openView(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	st, err := l.Stats(ctx)
	if err != nil {
		return err
	}
	counted, done := c.progress(l.Store(), "stats")
	states, err := ledger.CountStates(ctx, counted)
	done()
	bad, err := c.unreadable(l, err)
	if err != nil {
		return err
	}
	// Read at rest, the claims in flight are counted as filed, and those the next open takes
	// from their holders are named on stderr, as ls and show name them: before, stats counted
	// a killed holder's claim in_flight without a word, where check counts it unknown.
	outlived := outlivedOf(l)
	if outlived.on && states[fence.StateInFlight] > 0 {
		var now time.Time
		err := ledger.Walk(ctx, l.Store(), []fence.State{fence.StateInFlight}, ledger.Pass{
			Start:  func(at time.Time) error { now = at; return nil },
			Record: func(r *fence.Record) error { outlived.see(now, r); return nil },
		})
		var u *ledger.UnreadableRecords
		if err != nil && !errors.As(err, &u) { // an unreadable record is named above
			return err
		}
	}
	if err := stillRead(l); err != nil {
		return err
	}
	outlived.say(c.io.err)
	if c.json {
		if states == nil {
			states = map[fence.State]int{}
		}
		for _, s := range ledger.States { // every state, as the table shows them: 0 included
			states[s] += 0
		}
		out := map[string]any{"ledger": l.Location, "counters": st.Ledger, "total_attempts": st.Ledger.Total(), "prevented": st.Ledger.Prevented(), "states": states}
		if bad != nil {
			out["unreadable"] = unreadableJSON(bad)
		}
		if err := c.writeJSON(out); err != nil {
			return err
		}
		return bad.exit()
	}
	w := c.io.out
	fmt.Fprintf(w, "ledger %s (all processes): %s\n", esc(l.Location), st.Ledger.Line())
	t := tablewriter.NewTable(w)
	t.Header("state", "intents")
	for _, s := range ledger.States {
		if err := t.Append(c.out.state(s), fmt.Sprint(states[s])); err != nil {
			return err
		}
	}
	// A state no engine writes (a record edited by hand, or damaged, that still decodes) is
	// counted under it, escaped as ls shows it: left out, the rows summed to fewer intents
	// than the ledger holds, and --json counted them (TestLedgerStatsCountsARecordOfAForgedState).
	var other []fence.State
	for s := range states {
		if !slices.Contains(ledger.States, s) {
			other = append(other, s)
		}
	}
	slices.Sort(other)
	for _, s := range other {
		if err := t.Append(c.out.state(s), fmt.Sprint(states[s])); err != nil {
			return err
		}
	}
	if bad != nil {
		if err := t.Append("unreadable", fmt.Sprint(len(bad.recs))); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	return bad.exit()
}

func ledgerSweep(ctx context.Context, c ledgerCall) error {
	var age time.Duration
	if c.cmd.IsSet("events-older-than-secs") {
		var err error
		if age, err = store.ResultSeconds("--events-older-than-secs", c.cmd.Float("events-older-than-secs")); err != nil {
			return usageErr("ledger sweep: %v", err)
		}
	}
	l, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	n, err := l.Sweep(ctx)
	if err != nil {
		return err
	}
	n += l.SweptAtOpen // the open swept what had expired by then
	events := -1
	if age > 0 {
		if events, err = l.SweepEvents(ctx, age); err != nil {
			return err
		}
	}
	if c.json {
		out := map[string]any{"ledger": l.Location, "swept": n}
		if events >= 0 {
			out["events_swept"] = events
		}
		return c.writeJSON(out)
	}
	fmt.Fprintf(c.io.out, "ledger %s: swept %d expired outcome(s)", esc(l.Location), n)
	if events >= 0 {
		fmt.Fprintf(c.io.out, " and %d audit event(s)", events)
	}
	fmt.Fprintln(c.io.out)
	return nil
}

func ledgerCheck(ctx context.Context, c ledgerCall) error {
	// A ledger string that names no ledger is a usage error, as for every other subcommand.
	if _, err := c.opts.Location(); err != nil {
		return usageErr("%v", err)
	}
	rep, err := store.Check(ctx, c.opts)
	if err != nil {
		return err
	}
	if c.json {
		if err := c.writeJSON(rep); err != nil {
			return err
		}
	} else {
		w := c.io.out
		verdict := c.out.paint("OK", color.FgGreen)
		if !rep.OK {
			verdict = c.out.paint("PROBLEMS", color.FgRed, color.Bold)
		}
		fmt.Fprintf(w, "ledger %s: %s\nkind: %s, %d bytes (+%d WAL)", esc(rep.Path), verdict, esc(rep.Kind), rep.Bytes, rep.WALBytes)
		if rep.SchemaVersion > 0 {
			fmt.Fprintf(w, ", schema version %d (this build: %d)", rep.SchemaVersion, rep.BuildSchema)
		}
		fmt.Fprintln(w)
		if len(rep.States) > 0 || rep.Events > 0 {
			keys := make([]string, 0, len(rep.States))
			for k := range rep.States {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			parts := []string{}
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%s=%d", k, rep.States[k]))
			}
			fmt.Fprintf(w, "records: %s; events: %d\n", esc(strings.Join(parts, " ")), rep.Events)
		}
		if len(rep.Integrity) > 0 && (len(rep.Integrity) != 1 || rep.Integrity[0] != "ok") {
			fmt.Fprintln(w, "integrity_check:")
			for i, line := range rep.Integrity {
				if i == 20 {
					fmt.Fprintf(w, "  … %d more\n", len(rep.Integrity)-20)
					break
				}
				fmt.Fprintln(w, "  "+esc(line))
			}
		}
		for _, o := range rep.Outlived {
			fmt.Fprintln(w, "note: "+esc(o))
		}
		for _, p := range rep.Problems {
			fmt.Fprintln(w, "problem: "+esc(p))
		}
		for _, a := range rep.Advice {
			fmt.Fprintln(w, "what to do: "+esc(a))
		}
	}
	if !rep.OK {
		return exitCoder{exitError, fmt.Errorf("ledger %s has %d problem(s)", rep.Path, len(rep.Problems))}
	}
	return nil
}
