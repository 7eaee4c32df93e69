package policy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// redactList is a YAML flow list of n redact paths named prefix0, prefix1, ...
func redactList(prefix string, n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return "[" + strings.Join(items, ", ") + "]"
}

// A tool's redact paths (the defaults' and its entry's together) go into every fence request
// of the tool, and the fence refuses a request naming more than fence.MaxRedactPaths: a file
// `policy check` called ok made every call of such a tool "cannot be fenced ... NOT executed".
// Nothing in a file is ignored, and nothing it says may only fail at the first call: it is an
// error where the list is.
func TestRedactPathsBeyondTheFencesBoundRefused(t *testing.T) {
	over, half := fence.MaxRedactPaths+1, fence.MaxRedactPaths/2
	for _, src := range []string{
		"version: 1\ndefaults:\n  redact: " + redactList("d", over) + "\n",
		"version: 1\ntools:\n  charge:\n    redact: " + redactList("t", over) + "\n",
		"version: 1\ndefaults:\n  redact: " + redactList("d", half) + "\ntools:\n  \"charge_*\":\n    redact: " + redactList("t", half+1) + "\n",
	} {
		_, err := Parse("p.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprint(fence.MaxRedactPaths)) {
			t.Errorf("a tool with %d or more redact paths: %v\n%.200s", over, err, src)
		}
	}
	for _, src := range []string{
		"version: 1\ndefaults:\n  redact: " + redactList("d", half) + "\ntools:\n  \"charge_*\":\n    redact: " + redactList("t", half) + "\n",
		// the same path in both is one path
		"version: 1\ndefaults:\n  redact: " + redactList("d", fence.MaxRedactPaths) + "\ntools:\n  charge:\n    redact: " + redactList("d", fence.MaxRedactPaths) + "\n",
	} {
		p, err := Parse("p.yaml", []byte(src))
		if err != nil {
			t.Fatalf("%d distinct redact paths refused: %v", fence.MaxRedactPaths, err)
		}
		if n := len(p.For("charge_card").Redact) + len(p.For("charge").Redact); n == 0 {
			t.Fatal("no redact paths read")
		}
	}
}
