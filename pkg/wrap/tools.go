package wrap

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"

	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// toolInfo is what wrap needs to know about one of the child's tools. The tool's definition
// itself is never re-encoded: tools/list results are passed to the agent as the child wrote
// them.
type toolInfo struct {
	readOnly bool
	// keyProp is the idempotency-key-like string property of the input schema, if any.
	keyProp string
	// repeatProp: the schema itself declares RepeatArg, so it is the tool's own argument and
	// is forwarded.
	repeatProp bool
}

type toolPage struct {
	Tools []struct {
		Name        string `json:"name"`
		InputSchema struct {
			Properties map[string]struct {
				Type json.RawMessage `json:"type"`
			} `json:"properties"`
		} `json:"inputSchema"`
		Annotations struct {
			ReadOnlyHint bool `json:"readOnlyHint"`
		} `json:"annotations"`
	} `json:"tools"`
	NextCursor string `json:"nextCursor"`
}

// parseTools reads what wrap needs from one tools/list result page.
func parseTools(raw json.RawMessage) (map[string]toolInfo, string, error) {
	var p toolPage
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, "", fmt.Errorf("tools/list result: %v", err)
	}
	out := make(map[string]toolInfo, len(p.Tools))
	for _, t := range p.Tools {
		_, repeat := t.InputSchema.Properties[RepeatArg]
		info := toolInfo{readOnly: t.Annotations.ReadOnlyHint, repeatProp: repeat}
		names := make([]string, 0, len(t.InputSchema.Properties))
		for name := range t.InputSchema.Properties {
			names = append(names, name)
		}
		sort.Strings(names) // deterministic when a schema has two key-like properties
		for _, name := range names {
			if keyLike(name) && stringTyped(t.InputSchema.Properties[name].Type) {
				info.keyProp = name
				break
			}
		}
		out[t.Name] = info
	}
	return out, p.NextCursor, nil
}

// stringTyped reports whether a schema "type" admits a string (absent admits anything).
func stringTyped(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return true
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one == "string"
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil {
		for _, t := range many {
			if t == "string" {
				return true
			}
		}
	}
	return false
}

// toolCache is wrap's view of the child's tools, refreshed from every tools/list the agent
// makes and on notifications/tools/list_changed.
type toolCache struct {
	mu     sync.RWMutex
	tools  map[string]toolInfo
	loaded bool
}

func (c *toolCache) get(name string) (toolInfo, bool, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	t, ok := c.tools[name]
	return t, ok, c.loaded
}

// merge records one page; the first page (no cursor) replaces what was known.
func (c *toolCache) merge(page map[string]toolInfo, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if first || c.tools == nil {
		c.tools = map[string]toolInfo{}
	}
	for k, v := range page {
		c.tools[k] = v
	}
	c.loaded = true
}

// refresh lists every page of the child's tools.
func (c *toolCache) refresh(ctx context.Context, s *mcpstdio.Session) error {
	all := map[string]toolInfo{}
	cursor := ""
	for pages := 0; pages < 1000; pages++ {
		raw, err := s.ListTools(ctx, cursor)
		if err != nil {
			return err
		}
		page, next, err := parseTools(raw)
		if err != nil {
			return err
		}
		for k, v := range page {
			all[k] = v
		}
		if next == "" {
			break
		}
		cursor = next
	}
	c.merge(all, true)
	return nil
}
