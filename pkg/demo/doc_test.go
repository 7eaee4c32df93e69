package demo_test

import (
	"os"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
)

// TestDemoPrintsWhatTheDocShows: docs/probe-and-demo.md shows the whole output of
// `effectfence demo` and says it "prints the same thing every time"; the real binary must print
// exactly that.
func TestDemoPrintsWhatTheDocShows(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/probe-and-demo.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "$ effectfence demo\n")
	if !ok {
		t.Fatal("docs/probe-and-demo.md no longer shows a demo transcript")
	}
	want, _, _ := strings.Cut(after, "```")
	r := cmdtest.Run(t, nil, bin, "demo")
	if r.Code != 0 || r.Stdout != want {
		t.Fatalf("exit %d; demo prints:\n%s\nthe doc shows:\n%s", r.Code, r.Stdout, want)
	}
}
