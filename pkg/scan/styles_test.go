package scan

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// styleLabels is a fixture's hand labels: every tool it declares, as "effect" or "read", and
// the effect tools the scanner is known to miss (so a regression and an improvement both
// show up as a failure to update).
type styleLabels struct {
	Style       string            `json:"style"`
	Tools       map[string]string `json:"tools"`
	KnownMisses []string          `json:"known_misses"`
}

// TestRealStyles runs the scanner over small fixtures written to reproduce the declaration
// styles of the public MCP servers measured in docs/scan-evaluation.md (no code of theirs is
// copied), and checks each tool's label, then the totals against the targets:
// at least 85% of effect tools found, at most 5% of read-only tools flagged (issue 17).
func TestRealStyles(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "styles", "*"))
	if err != nil || len(dirs) < 10 {
		t.Fatalf("style fixtures: %v (%d found)", err, len(dirs))
	}
	var effects, found, reads, flagged int
	for _, dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, "labels.json"))
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		var lb styleLabels
		if err := json.Unmarshal(raw, &lb); err != nil {
			t.Fatalf("%s/labels.json: %v", dir, err)
		}
		rep := scanDir(t, dir, Options{})
		got := map[string]bool{}
		for _, tl := range rep.Candidates {
			got[tl.Name] = true
		}
		for _, tl := range rep.Others {
			got[tl.Name] = false
		}
		var extra []string
		for name := range got {
			if _, ok := lb.Tools[name]; !ok {
				extra = append(extra, name)
			}
		}
		sort.Strings(extra)
		if len(extra) > 0 {
			t.Errorf("%s: declarations that are not tools: %v", dir, extra)
		}
		known := map[string]bool{}
		for _, m := range lb.KnownMisses {
			known[m] = true
		}
		for name, label := range lb.Tools {
			cand, declared := got[name]
			switch {
			case !declared:
				t.Errorf("%s: tool %q not found", dir, name)
			case label == "effect":
				effects++
				if cand {
					found++
				}
				if cand == known[name] {
					t.Errorf("%s: effect tool %q candidate=%v, known miss=%v", dir, name, cand, known[name])
				}
			case label == "read":
				reads++
				if cand {
					flagged++
					t.Errorf("%s: read-only tool %q flagged", dir, name)
				}
			default:
				t.Errorf("%s: label %q for %q", dir, label, name)
			}
		}
	}
	recall := float64(found) / float64(effects)
	fpRate := float64(flagged) / float64(reads)
	t.Logf("style fixtures: %d/%d effect tools found (%.0f%%), %d/%d read-only flagged (%.0f%%)",
		found, effects, 100*recall, flagged, reads, 100*fpRate)
	if recall < 0.85 || fpRate > 0.05 {
		t.Errorf("recall %.2f (want >= 0.85), read-only flagged %.2f (want <= 0.05)", recall, fpRate)
	}
}
