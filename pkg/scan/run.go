package scan

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// PublishedTool is one tool as a running server lists it in tools/list: the ground truth
// for names, and its annotations as the author's own claims.
type PublishedTool struct {
	Name        string          `json:"name"`
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	Annotations *Annotations    `json:"annotations,omitempty"`
}

// Annotations are the MCP tool annotations; nil means the server did not say.
type Annotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitempty"`
	DestructiveHint *bool  `json:"destructiveHint,omitempty"`
	IdempotentHint  *bool  `json:"idempotentHint,omitempty"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitempty"`
}

// UnmarshalJSON reads the annotations a server publishes; a hint of another type than boolean
// ("readOnlyHint": "yes") is taken as not given, and a title that is not a string as none, so
// one server's odd entry does not stop the listing of every tool.
func (a *Annotations) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		*a = Annotations{} // not an object: nothing said
		return nil
	}
	hint := func(name string) *bool {
		var v bool
		if json.Unmarshal(raw[name], &v) != nil || string(raw[name]) == "null" {
			return nil
		}
		return &v
	}
	var title string
	_ = json.Unmarshal(raw["title"], &title)
	*a = Annotations{Title: title, ReadOnlyHint: hint("readOnlyHint"), DestructiveHint: hint("destructiveHint"),
		IdempotentHint: hint("idempotentHint"), OpenWorldHint: hint("openWorldHint")}
	return nil
}

// saysReadOnly reports an explicit readOnlyHint: true.
func (a *Annotations) saysReadOnly() bool {
	return a != nil && a.ReadOnlyHint != nil && *a.ReadOnlyHint
}

// saysEffect reports an explicit readOnlyHint: false, or destructiveHint: true without
// readOnlyHint: true. Absent hints are not evidence: the protocol's defaults are not the
// author's claims.
func (a *Annotations) saysEffect() bool {
	if a == nil || a.saysReadOnly() {
		return false
	}
	return a.ReadOnlyHint != nil && !*a.ReadOnlyHint || a.DestructiveHint != nil && *a.DestructiveHint
}

// RunConfig says how to start a server to ask it for its tools.
type RunConfig struct {
	Command []string      // argv of the stdio MCP server
	Dir     string        // its working directory ("" for ours)
	Env     []string      // added to this process's environment
	Timeout time.Duration // for start, handshake and the whole listing; default 30 s
	Stderr  io.Writer     // the server's stderr; default io.Discard
}

// maxListPages bounds a tools/list that keeps returning cursors.
const maxListPages = 1000

// maxListBytes bounds the bytes of a tools/list's pages together.
const maxListBytes = 64 << 20

// ListPublished starts the server, completes the MCP handshake, reads every page of
// tools/list and stops the server. The result is the server's own list, in its order.
func ListPublished(ctx context.Context, rc RunConfig) ([]PublishedTool, error) {
	if len(rc.Command) == 0 {
		return nil, errors.New("scan: --run needs a server command after --")
	}
	if rc.Timeout <= 0 {
		rc.Timeout = 30 * time.Second
	}
	if rc.Stderr == nil {
		rc.Stderr = io.Discard
	}
	ctx, cancel := context.WithTimeout(ctx, rc.Timeout)
	defer cancel()
	sess, err := mcpstdio.Start(ctx, mcpstdio.Config{Command: rc.Command, Dir: rc.Dir, Env: rc.Env,
		Stderr: rc.Stderr, InitTimeout: rc.Timeout})
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != context.Canceled {
		// Said as the listing's timeout is: before 2026-12-07 a server that never answered the
		// handshake got only "... failed: context deadline exceeded".
		return nil, fmt.Errorf("scan: the server did not complete the MCP handshake within %s: %w", rc.Timeout, err)
	}
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	var out []PublishedTool
	cursor := ""
	total := 0
	for page := 0; ; page++ {
		if page == maxListPages {
			return nil, fmt.Errorf("scan: tools/list returned more than %d pages", maxListPages)
		}
		raw, err := sess.ListTools(ctx, cursor)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, fmt.Errorf("scan: the server did not list its tools within %s", rc.Timeout)
			}
			return nil, fmt.Errorf("scan: tools/list: %w", err)
		}
		// Every page is kept: a server whose cursors never end, each page of megabytes, held
		// gigabytes of them before --run-timeout.
		if total += len(raw); total > maxListBytes {
			return nil, fmt.Errorf("scan: tools/list is longer than %d MiB (%d pages)", maxListBytes>>20, page+1)
		}
		tools, next, err := parsePublished(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, tools...)
		if next == "" {
			return out, nil
		}
		cursor = next
	}
}

// parsePublished reads one tools/list result page.
func parsePublished(raw json.RawMessage) ([]PublishedTool, string, error) {
	var res struct {
		Tools      []PublishedTool `json:"tools"`
		NextCursor string          `json:"nextCursor"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, "", fmt.Errorf("scan: tools/list result is not a tool list: %v", err)
	}
	for _, t := range res.Tools {
		if t.Name == "" {
			return nil, "", errors.New("scan: tools/list holds a tool without a name")
		}
	}
	return res.Tools, res.NextCursor, nil
}

// RunReport is what --run adds: the server's list as ground truth, set against the code.
type RunReport struct {
	Command       []string        `json:"command"`
	Published     []PublishedTool `json:"published"`
	NotInCode     []string        `json:"published_not_found_in_code"`
	NotPublished  []string        `json:"declared_not_published"`
	Disagreements []Disagreement  `json:"disagreements"`
}

// Disagreement is a published annotation that says something other than the code does.
type Disagreement struct {
	Tool       string `json:"tool"`
	Annotation string `json:"annotation"` // what the server publishes
	Code       string `json:"code"`       // what the code suggests, and why
}

func boolText(b *bool) string {
	switch {
	case b == nil:
		return "unset"
	case *b:
		return "true"
	default:
		return "false"
	}
}

// annotationText is readOnlyHint/destructiveHint as published, for reports.
func annotationText(a *Annotations) string {
	if a == nil {
		return "no annotations"
	}
	return "readOnlyHint " + boolText(a.ReadOnlyHint) + ", destructiveHint " + boolText(a.DestructiveHint)
}

// FindTools is the tool finder on its own, for callers that need the declarations rather
// than a review report (policy init --scan): every tool the scan found, candidates and not,
// sorted by file and line, with the notes on what it could not see. opts.Published, when
// set, makes the server's list the ground truth as in Scan.
func FindTools(ctx context.Context, root string, opts Options) ([]Tool, []Note, error) {
	rep, err := Scan(ctx, root, opts)
	if err != nil {
		return nil, nil, err
	}
	all := append(append([]Tool{}, rep.Candidates...), rep.Others...)
	sortTools(all)
	return all, rep.Notes, nil
}
