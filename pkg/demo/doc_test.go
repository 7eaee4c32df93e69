package demo_test

import (
	"os"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
)

// TestDemoPrintsWhatTheDocShows: docs/probe-and-demo.md shows the whole output of
// `effectfence demo` and says it "prints the same thing every time"; the real binary must print
// exactly that, and what README.md shows of it.
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

	// The README shows it with the table left out ("..."): every piece it shows is printed, in
	// that order.
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok = strings.Cut(string(readme), "$ effectfence demo\n")
	if !ok {
		t.Fatal("README.md no longer shows a demo transcript")
	}
	shown, _, _ := strings.Cut(after, "```")
	rest := r.Stdout
	for _, piece := range strings.Split(shown, "...\n") {
		i := strings.Index(rest, piece)
		if i < 0 {
			t.Fatalf("README's demo shows what the demo does not print (in this order):\n%s\ndemo prints:\n%s", piece, r.Stdout)
		}
		rest = rest[i+len(piece):]
	}
}
