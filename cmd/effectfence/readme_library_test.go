package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeLibraryQuickStartRuns compiles and runs the README's "Library quick start" as it
// is written (a program around it gives it ctx and the effect, charge), then checks that what
// it committed is replayed to a duplicate. The program lives only in a build overlay: nothing
// is written into the repository.
func TestReadmeLibraryQuickStartRuns(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	at := strings.Index(string(readme), "## Library quick start")
	if at < 0 {
		t.Fatal(`README.md has no "## Library quick start"`)
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindSubmatch(readme[at:])
	if m == nil {
		t.Fatal("the library quick start has no ```go block")
	}
	var body []string
	for _, l := range strings.Split(string(m[1]), "\n") {
		if strings.HasPrefix(l, "import ") {
			if l != `import "github.com/effectfence/effectfence/pkg/fence"` {
				t.Fatalf("the quick start imports %s; this test knows only pkg/fence", l)
			}
			continue
		}
		body = append(body, "\t"+l)
	}
	prog := `package main

import (
	"context"
	"fmt"
	"os"

	"github.com/effectfence/effectfence/pkg/fence"
)

var charges int

func charge() []byte { charges++; return []byte(` + "`" + `{"charge":"ch_1"}` + "`" + `) }

func main() {
	ctx := context.Background()
` + strings.Join(body, "\n") + `
	again, err := eng.Prepare(ctx, fence.Request{Intent: "charge:order-123", Tool: "charge_card",
		Args: []byte(` + "`" + `{"amount":4900}` + "`" + `), Domain: "order:123", Agent: "billing-agent"})
	if err != nil || again.Cert == nil || string(again.Cert.Result) != ` + "`" + `{"charge":"ch_1"}` + "`" + ` || charges != 1 {
		fmt.Fprintf(os.Stderr, "a duplicate after the quick start: %+v %v (charged %d times)\n", again, err, charges)
		os.Exit(3)
	}
	fmt.Println("replayed")
}
`
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte(prog), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(root, "internal", "readmequickstart", "main.go"): src}})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "-overlay", ov, "./internal/readmequickstart")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "replayed" {
		t.Fatalf("the README's library quick start: %v\n%s\nthe program:\n%s", err, out, prog)
	}
}
