package scan

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRealPackages scans the published JavaScript of two real MCP servers, installed by
// scripts/install-peers (the README's test command runs it), and checks the hand labels in
// docs/scan-evaluation.md: every tool declared, the effect tools found, the read-only tools
// not flagged except the judgement calls recorded there.
func TestRealPackages(t *testing.T) {
	peers := filepath.Join("..", "..", ".peers", "node_modules", "@modelcontextprotocol")
	if _, err := os.Stat(peers); err != nil {
		t.Skip("npm peers not installed (.peers missing); run scripts/install-peers to scan the real server packages")
	}
	cases := []struct {
		pkg             string
		effect, read    []string
		missed, flagged []string // recorded in docs/scan-evaluation.md
	}{
		{
			pkg:    "server-memory",
			effect: []string{"create_entities", "create_relations", "add_observations", "delete_entities", "delete_observations", "delete_relations"},
			read:   []string{"read_graph", "search_nodes", "open_nodes"},
		},
		{
			pkg:    "server-everything",
			effect: []string{"gzip-file-as-resource", "toggle-simulated-logging", "toggle-subscriber-updates", "simulate-research-query"},
			read: []string{"echo", "get-annotated-message", "get-env", "get-resource-links", "get-resource-reference", "get-roots-list",
				"get-structured-content", "get-sum", "get-tiny-image", "trigger-elicitation-request-async", "trigger-elicitation-request",
				"trigger-long-running-operation", "trigger-sampling-request-async", "trigger-sampling-request", "trigger-url-elicitation"},
			missed:  []string{"simulate-research-query"},
			flagged: []string{"trigger-elicitation-request-async", "trigger-elicitation-request", "trigger-sampling-request-async", "trigger-sampling-request", "trigger-url-elicitation"},
		},
	}
	for _, c := range cases {
		t.Run(c.pkg, func(t *testing.T) {
			rep := scanDir(t, filepath.Join(peers, c.pkg, "dist"), Options{})
			expect := func(names, exceptions []string, want bool) {
				ex := map[string]bool{}
				for _, e := range exceptions {
					ex[e] = true
				}
				for _, n := range names {
					tl, ok := findTool(rep, n)
					if !ok {
						t.Errorf("tool %q not declared", n)
						continue
					}
					if tl.Candidate != (want != ex[n]) {
						t.Errorf("tool %q: candidate=%v (%s)", n, tl.Candidate, tl.Reason)
					}
				}
			}
			expect(c.effect, c.missed, true)
			expect(c.read, c.flagged, false)
			if n := len(rep.Candidates) + len(rep.Others); n != len(c.effect)+len(c.read) {
				t.Errorf("%d tools declared, want %d: %v %v", n, len(c.effect)+len(c.read), toolNames(rep.Candidates), toolNames(rep.Others))
			}
		})
	}
}
