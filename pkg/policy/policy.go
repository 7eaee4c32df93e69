// Package policy reads an effectfence policy file: the YAML form of wrap's flags, per tool
// (by exact name or glob) and per server, so a team can review one file instead of a wall of
// flags in an MCP config.
//
// Guarantees: a file is either accepted whole or refused with every error found, each naming
// file:line:column; an unknown key, a value of the wrong type, a duration out of bounds, a bad
// field path or glob, a tool named twice and two globs that could match the same tool with
// the same specificity are all errors, never ignored; so is a Unicode format or control character
// or a line or paragraph separator written as itself, which hides or reorders what a reviewer
// of the file sees. Field paths use wrap's syntax
// (wrap.ParsePath, fence.CheckRedactPath), so a path means the same in a flag and in a file.
//
// Which entry applies to a tool (see Policy.For): the entry naming it exactly, else the
// matching glob with the most literal (non-'*') characters; Check refuses two globs of equal
// specificity that some name matches both, so the choice never depends on file order. Each
// setting the chosen entry leaves out comes from defaults; redact adds up (defaults, entry and
// flags), since a field redacted in a reviewed file must not be un-redacted by accident.
// Flags win over the file (Resolve).
package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// Version is the only policy format version this package reads (`version: 1`).
const Version = 1

// Policy is a parsed, checked policy file.
type Policy struct {
	// File is the name the file was read as, for messages.
	File string
	// Scope names the server's scope (wrap --scope); "" derives it.
	Scope string
	// Ledger is where the ledger lives (wrap --ledger); "" for the default.
	Ledger string
	// FenceReads fences tools annotated readOnlyHint too (nil: not set).
	FenceReads *bool
	// Defaults apply to every tool for each setting its entry leaves out.
	Defaults ToolPolicy
	// Tools are the per-tool entries in file order.
	Tools []Entry
	// OnUnknown is the hook run when a call's outcome becomes unknown (nil: none).
	OnUnknown *Hook
}

// Entry is one entry under tools: an exact tool name or a glob.
type Entry struct {
	// Pattern is the key: a tool name, or a glob when it contains '*' or '?'.
	Pattern string
	// Line and Column locate the key in the file.
	Line, Column int
	ToolPolicy
}

// Glob reports whether the entry is a glob.
func (e Entry) Glob() bool { return strings.ContainsAny(e.Pattern, "*?") }

// ToolPolicy are the settings of one tool; a nil pointer, nil slice, zero duration or empty
// Result means "not set here".
type ToolPolicy struct {
	// Fence true fences the tool even if annotated read-only; false passes it through.
	Fence *bool
	// Key names the identity fields; Ignore leaves fields out of the identity. An empty,
	// non-nil Ignore means "none" (it overrides defaults).
	Key, Ignore []wrap.Path
	// ReplayWindow is how long a recorded result answers an identical call.
	ReplayWindow time.Duration
	// RerunSafe: the tool's calls may run twice without harm (a lapsed claim is taken over).
	RerunSafe *bool
	// Redact are argument fields the ledger stores as [redacted].
	Redact []string
	// Result is what the ledger keeps of a result: fence.KeepFull or fence.KeepHash.
	Result fence.KeepResult
	// Wait bounds how long a duplicate waits for the identical call in flight, and how long a
	// call waits for the server's tool listing (a tool passed through too).
	Wait time.Duration
	// Elicit: a person may be asked (MCP elicitation) about an unknown outcome. Default true.
	Elicit *bool
}

// Hook is on_unknown: a command run, or a URL POSTed, when a call's outcome becomes unknown.
// Exactly one of Command and URL is set.
type Hook struct {
	Command []string
	URL     string
	// Retries is how many times a failed delivery is tried again (default DefaultRetries).
	Retries int
	// Timeout bounds one delivery (default DefaultTimeout).
	Timeout time.Duration
}

// Defaults of on_unknown.
const (
	DefaultRetries = 3
	DefaultTimeout = 10 * time.Second
)

// Error is one problem in a policy file, at a line and column (1-based; 0 when the problem is
// the file as a whole).
type Error struct {
	File         string
	Line, Column int
	Msg          string
}

func (e Error) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
}

// Errors are every problem found in a file, in the order of the file.
type Errors []Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}
