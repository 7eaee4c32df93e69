package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/store/postgres"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// resolveSub is `effectfence ledger resolve`.
func resolveSub(io streams) *cli.Command {
	// The answers are flags, shown in the usage line: the arguments are only the intent, so a
	// missing one is reported as "missing INTENT".
	return ledgerSub(io, "resolve", "INTENT",
		"settle an intent of unknown outcome after checking the real system, with --reason TEXT and one of: --happened [--result JSON] [--ref TEXT] (duplicates get a recorded result), --did-not-happen (the next attempt runs), --leave-fenced (only your note is recorded)", 1,
		[]cli.Flag{
			&cli.BoolFlag{Name: "happened", Usage: "the effect took place: record the intent done, so duplicates are answered instead of run"},
			&cli.BoolFlag{Name: "did-not-happen", Usage: "the effect did not take place: free the intent, the next attempt runs it"},
			&cli.BoolFlag{Name: "leave-fenced", Usage: "not known yet: keep it fenced; only your note is recorded"},
			&cli.StringFlag{Name: "result", Usage: "with --happened: the JSON duplicates are answered with (default: a tool result saying a person confirmed it)"},
			&cli.StringFlag{Name: "ref", Usage: "with --happened: a reference such as a charge id, put in the default result and the audit trail"},
			&cli.StringFlag{Name: "reason", Usage: "what you checked in the real system (required; recorded with who you are)"},
			claimFlag(),
			&cli.FloatFlag{Name: "result-ttl-secs", Usage: "with --happened: how long duplicates are answered with the recorded result, in `SECONDS` (1 to 366 days; default EFFECTFENCE_RESULT_TTL_SECS, else 86400): give the wraps' own when it is longer, or their longer replay windows are cut short to it"},
		}, ledgerResolve)
}

func ledgerResolve(ctx context.Context, c ledgerCall) error {
	var how fence.Resolution
	n := 0
	for _, v := range []struct {
		flag string
		how  fence.Resolution
	}{{"happened", fence.Happened}, {"did-not-happen", fence.DidNotHappen}, {"leave-fenced", fence.LeaveFenced}} {
		if c.cmd.Bool(v.flag) {
			how, n = v.how, n+1
		}
	}
	if n != 1 {
		return usageErr("ledger resolve: give exactly one of --happened, --did-not-happen and --leave-fenced")
	}
	reason := strings.TrimSpace(c.cmd.String("reason"))
	if reason == "" {
		return usageErr("ledger resolve: --reason is required: say what you checked in the real system (it is recorded with who you are)")
	}
	result, ref := c.cmd.String("result"), c.cmd.String("ref")
	for _, f := range [][2]string{{"reason", reason}, {"result", result}, {"ref", ref}} {
		if err := operatorText("resolve", f[0], f[1]); err != nil {
			return err
		}
	}
	if how != fence.Happened && (c.cmd.IsSet("result") || c.cmd.IsSet("ref") || c.cmd.IsSet("result-ttl-secs")) {
		return usageErr("ledger resolve: --result, --ref and --result-ttl-secs go with --happened only")
	}
	if c.cmd.IsSet("result-ttl-secs") {
		ttl, err := store.ResultSeconds("--result-ttl-secs", c.cmd.Float("result-ttl-secs"))
		if err != nil {
			return usageErr("ledger resolve: %v", err)
		}
		c.opts.ResultTTL = ttl
	}
	if c.cmd.IsSet("result") && !json.Valid([]byte(result)) {
		return usageErr("ledger resolve: --result is not JSON; give the result duplicates should receive, e.g. '{\"content\":[{\"type\":\"text\",\"text\":\"charged: ch_123\"}]}'")
	}
	if c.cmd.IsSet("result") && strings.HasPrefix(c.args[0], "wrap:") && !isJSONObject(result) {
		// wrap replays the recorded result as the tool's answer, which MCP's clients read as a
		// CallToolResult, an object: a bare 5 or "ok" would be replayed to every duplicate and
		// refused by each client.
		return usageErr("ledger resolve: --result for a wrap intent is the MCP tool result duplicates receive, a JSON object, e.g. '{\"content\":[{\"type\":\"text\",\"text\":\"charged: ch_123\"}]}'")
	}
	claim, err := c.claim("resolve")
	if err != nil {
		return err
	}
	l, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer l.Close()
	who := ledger.Operator()
	req := fence.ResolveRequest{Intent: c.args[0], How: how, Ref: ref, Who: who, Via: "cli", Reason: reason, Token: claim}
	if result != "" {
		req.Result = json.RawMessage(result)
	}
	res, err := l.Resolve(ctx, req)
	var before fence.SettledBeforeError
	if errors.As(err, &before) {
		// The retry of a resolution that landed, its answer lost: done, and said so (before
		// 2026-12-07 it was told the ledger holds no such intent, or that it is done, exit 1).
		return c.settledBefore("resolve", before, l.Location)
	}
	if oerr := c.otherClaim(err, l.Location); oerr != nil {
		return oerr
	}
	switch {
	case errors.Is(err, fence.ErrNotFound):
		return fmt.Errorf("ledger %s holds no intent %q; nothing resolved%s", l.Location, c.args[0], notFoundHint(ctx, l.Store(), c.args[0], "ls --state fenced"))
	case errors.Is(err, fence.ErrNotFenced):
		var nf fence.NotFencedError
		if errors.As(err, &nf) && how == fence.DidNotHappen && nf.State != fence.StateDone {
			return fmt.Errorf("ledger %s: %v (`effectfence ledger clear --force` frees it anyway, if you know the effect is not running)", l.Location, err)
		}
		return fmt.Errorf("ledger %s: %v", l.Location, err)
	case errors.As(err, new(postgres.CommitUnknownError)):
		// The resolution reached the database and its answer did not. Resolving again blind
		// is no way out: with --did-not-happen, a next attempt may have claimed the intent
		// since, and may be fenced again by the time a second resolution arrives.
		retry := []string{"--" + strings.ReplaceAll(string(how), "_", "-")}
		if c.cmd.IsSet("result") {
			retry = append(retry, "--result "+shellQuote(result))
		}
		if ref != "" {
			retry = append(retry, "--ref "+shellQuote(ref))
		}
		if c.cmd.IsSet("result-ttl-secs") {
			retry = append(retry, fmt.Sprintf("--result-ttl-secs %g", c.cmd.Float("result-ttl-secs")))
		}
		return fmt.Errorf("ledger resolve: the outcome is unknown: %q may or may not be resolved: the connection to ledger %s was lost after the resolution was sent to commit, and the database could not be asked whether it committed. Once it answers, look: %s — a %s event by %s means it was resolved (do not resolve again); the record fenced as before, without that event, means it was not. To retry, name the claim, so that the retry tells you if the resolution landed and never settles a new attempt: %s: %w",
			c.args[0], l.Location, intentCommand("show", c.args[0], c.selection(l.Location), ""), "resolve_"+string(how), who, retryCommand("resolve", c.args[0], c.selection(l.Location), res.Prev.Token, false, reason, retry...), err)
	case errors.As(err, new(postgres.ConnLostError)):
		return fmt.Errorf("ledger resolve: %q was not resolved (the connection to ledger %s was lost before the resolution committed; nothing was recorded): %w", c.args[0], l.Location, err)
	case err != nil:
		return err
	}
	if c.json {
		out := map[string]any{"resolved": res.Prev.Intent, "as": how, "previous_state": res.Prev.State, "who": res.Event.Who, "reason": res.Event.Reason, "ledger": l.Location}
		if res.Cert != nil {
			out["cert"] = res.Cert
			out["expires_at"] = res.Event.At.Add(l.Config().ResultTTL).UTC()
		}
		return c.writeJSON(out)
	}
	fmt.Fprintf(c.io.out, "resolved %s (was %s) as %s in ledger %s by %s: %s\n", escID(res.Prev.Intent), c.out.state(res.Prev.State), how, esc(l.Location), esc(res.Event.Who), esc(reason))
	switch how {
	case fence.Happened:
		// The record lives for this command's result TTL, not the wraps': said, with the flag
		// that sets it (before 2026-12-06 the answer said duplicates do not run, and a retry a
		// day later, under wraps that keep results a week, ran the effect again).
		until := stamp(res.Event.At.Add(l.Config().ResultTTL))
		if strings.HasPrefix(res.Prev.Intent, "wrap:") {
			// A wrap replays a done record only within its replay window from the record's
			// time, which is now: said, as the TTL is (before 2026-12-07 this answer promised
			// no run until the TTL ended, and an identical call ten minutes on ran again).
			fmt.Fprintf(c.io.out, "recorded done (cert %s): a wrap answers an identical call with the recorded result, without running it, within its replay window from now (%s unless the wrap's --replay-window or policy says otherwise) and until %s at the latest (the result TTL of this command: --result-ttl-secs, else EFFECTFENCE_RESULT_TTL_SECS, else 24 h); an identical call after its replay window runs as a new action.\n",
				res.Cert.Hash, wrap.DefaultReplayWindow, until)
			return nil
		}
		fmt.Fprintf(c.io.out, "recorded done (cert %s): duplicates are answered with the recorded result and do not run, until %s (the result TTL of this command: --result-ttl-secs, else EFFECTFENCE_RESULT_TTL_SECS, else 24 h; the wraps' replay windows are cut short to it).\n",
			res.Cert.Hash, until)
	case fence.DidNotHappen:
		fmt.Fprintln(c.io.out, "the next attempt of this intent runs the effect.")
	default:
		fmt.Fprintln(c.io.out, "it stays fenced: duplicates are refused until it is resolved or cleared.")
	}
	return nil
}

// isJSONObject says whether s (valid JSON) is an object.
func isJSONObject(s string) bool {
	t := strings.TrimLeft(s, " \t\r\n")
	return strings.HasPrefix(t, "{")
}
