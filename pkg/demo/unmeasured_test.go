package demo_test

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/demo"
	"github.com/effectfence/effectfence/pkg/probe"
)

// TestDemoNeverClaimsAnUnmeasuredSuccess holds docs/probe-and-demo.md's "the exit code is 0
// only if Act 1 double-fired and Act 2 executed exactly once with 12 clean answers, so the
// demo can never print a success it did not measure". The acts run real children (the built
// binary as demo-server, and as wrap); the spawner swaps what each act runs: Act 2 without
// its fence must fail and print no EXACTLY ONCE, and Act 1 behind a fence must fail too.
func TestDemoNeverClaimsAnUnmeasuredSuccess(t *testing.T) {
	t.Parallel()
	// unfence runs what an act's "effectfence wrap -- SERVER" wraps: the raw server, no fence.
	unfence := func(argv []string) []string {
		if i := slices.Index(argv, "wrap"); i >= 0 && i+1 < len(argv) && argv[i+1] == "--" {
			return argv[i+2:]
		}
		return argv
	}
	// fence puts "wrap --" in front of an act's raw server, with a throwaway ledger.
	fence := func(argv []string, env []string) ([]string, []string) {
		if slices.Contains(argv, "wrap") {
			return argv, env
		}
		return append([]string{argv[0], "wrap", "--"}, argv...), append(env, "EFFECTFENCE_LEDGER=memory")
	}
	for _, c := range []struct {
		name    string
		swap    func(argv, env []string) ([]string, []string)
		wantErr string
		notOut  []string
	}{
		{"act 2 without its fence", func(argv, env []string) ([]string, []string) { return unfence(argv), env }, "not once",
			[]string{"\n  EXACTLY ONCE:", "all the same charge"}},
		{"act 1 behind a fence", fence, "should have double-fired", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out strings.Builder
			_, err := demo.Run(context.Background(), &out, demo.Options{
				Self: bin, Dir: t.TempDir(),
				Spawn: func(ctx context.Context, argv, env []string) (probe.Conn, error) {
					argv, env = c.swap(argv, env)
					return probe.Spawn(ctx, argv, env, io.Discard)
				},
			})
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("demo.Run: %v; want an error saying %q\n%s", err, c.wantErr, out.String())
			}
			for _, claim := range c.notOut {
				if strings.Contains(out.String(), claim) {
					t.Errorf("the story claims %q, which the run did not measure:\n%s", claim, out.String())
				}
			}
		})
	}
}
