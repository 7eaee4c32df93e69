package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/effectfence/effectfence/internal/safetext"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/policy"
	"github.com/effectfence/effectfence/pkg/store"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// envPolicy names the policy file when --policy is not given.
const envPolicy = "EFFECTFENCE_POLICY"

// policyFlag is wrap's --policy, whichever back (a command, an upstream) wrap serves. It reads
// EFFECTFENCE_POLICY itself (wrapPolicy), not as the flag's source, so that an empty --policy
// is told from an empty or unset variable.
func policyFlag() cli.Flag {
	return &cli.StringFlag{Name: "policy", Usage: "read per-tool and server settings from this YAML policy `FILE` (docs/policy.md); flags win over it [$" + envPolicy + "]"}
}

// emptyNameFlag is the usage error of an empty --scope or --policy (flag "scope" or "policy"),
// what an MCP config's or a script's unset variable gives (--scope "$SCOPE"). Read as no flag,
// --scope "" meant the scope derived from the command, directory and environment, and
// --policy "" no policy file for wrap and EFFECTFENCE_POLICY's for a ledger command: a wrap
// fenced its calls in a ledger its peers do not share, without the policy's redact and key
// settings, and a ledger command settled an intent of another ledger
// (TestEmptyScopeOrPolicyFlagStartsNoFence, TestEmptyScopeOrPolicyFlagActsOnNoLedger).
func emptyNameFlag(command, flag string) error {
	if flag == "scope" {
		return usageErr("%s: --scope is empty: give the scope's name (without --scope, the scope is derived from the command, working directory and environment; nothing was opened)", command)
	}
	return usageErr("%s: --policy is empty: give the policy file's path (without --policy, %s or no policy is used; nothing was opened)", command, envPolicy)
}

// givenEmpty reports whether --scope or --policy was given empty: a scope of spaces is a name
// (wrap has taken it as one), a policy path of spaces names no file.
func givenEmpty(cmd *cli.Command, flag string) bool {
	v := cmd.String(flag)
	if flag == "policy" {
		v = strings.TrimSpace(v)
	}
	return cmd.IsSet(flag) && v == ""
}

// wrapPolicy loads the policy named by --policy or EFFECTFENCE_POLICY (if any) and folds the
// flags over it. The ledger given by --ledger or EFFECTFENCE_LEDGER wins over the file's.
func wrapPolicy(cmd *cli.Command, opt wrap.Options, io streams) (policy.Resolved, error) {
	for _, flag := range []string{"scope", "policy"} {
		if givenEmpty(cmd, flag) {
			return policy.Resolved{}, emptyNameFlag("wrap", flag)
		}
	}
	f := policy.Flags{Options: opt, Wait: cmd.IsSet("wait"), FenceReads: cmd.IsSet("fence-reads"), Scope: cmd.String("scope")}
	if cmd.IsSet("ledger") {
		if cmd.String("ledger") == "" {
			return policy.Resolved{}, emptyLedgerFlag("wrap")
		}
		f.Ledger = cmd.String("ledger")
	} else {
		f.Ledger = os.Getenv(store.EnvLedger)
	}
	path := os.Getenv(envPolicy)
	if cmd.IsSet("policy") {
		path = cmd.String("policy")
	}
	var pol *policy.Policy
	if path != "" {
		var err error
		if pol, err = policy.Load(path); err != nil {
			return policy.Resolved{}, usageErr("%v", policyLoadError(path, err))
		}
		fmt.Fprintf(io.err, "effectfence wrap: policy %s (flags win over it)\n", safetext.Escape(pol.Summary()))
	}
	res := policy.Resolve(pol, f)
	// The file alone was checked by policy.Load; here the per-tool flags, alone or over the
	// file, for each tool they name: settings of a tool that passes through have no effect,
	// and a key field cut by an ignored one makes distinct calls one.
	named := map[string]bool{}
	for _, tools := range [][]string{slices.Collect(maps.Keys(opt.Key)), slices.Collect(maps.Keys(opt.Ignore)), slices.Collect(maps.Keys(opt.Redact)),
		slices.Collect(maps.Keys(opt.KeepResult)), slices.Collect(maps.Keys(opt.ReplayWindows)), opt.RerunSafe} {
		for _, tool := range tools {
			named[tool] = true
		}
	}
	for tool := range named {
		key, ignore, pass, redact := opt.Key[tool], opt.Ignore[tool], slices.Contains(opt.Pass, tool), opt.Redact[tool]
		if res.Options.PerTool != nil {
			s := res.Options.PerTool(tool)
			key, ignore, pass, redact = s.Key, s.Ignore, s.Pass, s.Redact
		}
		if len(redact) > fence.MaxRedactPaths {
			// Each call's fence request carries them all, and the fence refuses more.
			return policy.Resolved{}, usageErr("tool %q: --redact names %d paths (with the policy file's, if any); a call's redact paths are at most %d, so every call of the tool would be refused, NOT executed", tool, len(redact), fence.MaxRedactPaths)
		}
		if given := wrap.GivenFlags(opt, tool); pass && len(given) > 0 {
			return policy.Resolved{}, usageErr("tool %q passes through unfenced (--pass, or fence: false in the policy), so %s would have no effect; drop them, or fence the tool", tool, strings.Join(given, ", "))
		}
		if k, i, cut := wrap.IgnoredKey(key, ignore); cut {
			from := "--key and --ignore-field"
			if pol != nil {
				from += " over the policy file"
			}
			return policy.Resolved{}, usageErr("tool %q: %v (%s)", tool, wrap.IgnoredKeyError(k, i), from)
		}
	}
	if h := res.OnUnknown; h != nil {
		retries := h.Retries
		if retries == 0 { // the file's `retries: 0`: wrap.Hook's 0 would be its default
			retries = wrap.NoHookRetries
		}
		res.Options.OnUnknown = &wrap.Hook{Command: h.Command, URL: h.URL, Retries: retries, Timeout: h.Timeout}
		if err := res.Options.OnUnknown.Check(); err != nil {
			return policy.Resolved{}, usageErr("policy on_unknown: %v", err)
		}
		// The hook runs when an outcome becomes unknown: a program it cannot run must be
		// found now, not then.
		if len(h.Command) > 0 {
			if err := lookCommand(h.Command[0]); err != nil {
				return policy.Resolved{}, usageErr("policy %s: on_unknown: cannot run %q: %v", pol.File, h.Command[0], unwrapExec(err))
			}
		}
	}
	return res, nil
}

// policyLoadError says a policy file's errors in one line, as every usage error is said: the
// first, and how many more there are (policy check lists each on its own line). Joined as
// they were, the errors' line breaks reached stderr escaped, as a literal \n between them.
func policyLoadError(path string, err error) error {
	var errs policy.Errors
	if !errors.As(err, &errs) || len(errs) < 2 {
		return err
	}
	return fmt.Errorf("%v (%d errors in all: `effectfence policy check %s` lists each)", errs[0], len(errs), wrap.ShellJoin([]string{path}))
}
