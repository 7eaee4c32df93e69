package gatewaymetrics_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/gatewaymetrics"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// docMetrics returns the rows of docs/gateway.md's Metrics table: metric name -> the row.
func docMetrics(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/gateway.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "\n## Metrics\n")
	if i < 0 {
		t.Fatal("docs/gateway.md has no Metrics section")
	}
	sec := doc[i+1:]
	if j := strings.Index(sec[3:], "\n## "); j >= 0 {
		sec = sec[:j+3]
	}
	rows := map[string]string{}
	name := regexp.MustCompile("^\\| `(effectfence_[a-z_]+)` \\|")
	for line := range strings.SplitSeq(sec, "\n") {
		if m := name.FindStringSubmatch(line); m != nil {
			rows[m[1]] = line
		}
	}
	if len(rows) == 0 {
		t.Fatal("no effectfence_ metric in docs/gateway.md's Metrics table")
	}
	return rows
}

// listAfter returns the comma-separated values written after prefix in row, up to the first
// of ends.
func listAfter(t *testing.T, row, prefix string, ends ...string) []string {
	t.Helper()
	i := strings.Index(row, prefix)
	if i < 0 {
		t.Fatalf("row has no %q: %s", prefix, row)
	}
	s := row[i+len(prefix):]
	for _, e := range ends {
		if j := strings.Index(s, e); j >= 0 {
			s = s[:j]
		}
	}
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		out = append(out, strings.TrimSpace(v))
	}
	return out
}

// TestDocsNameEveryMetric: the Metrics table of docs/gateway.md names every effectfence_
// metric a gateway exports and no other, and its label values are the fixed lists the
// metrics are bounded by (an operator writes alerts from that table).
func TestDocsNameEveryMetric(t *testing.T) {
	rows := docMetrics(t)
	m := gatewaymetrics.New("charge")
	m.WatchEngine(fence.New(fence.NewMemoryStore(), fence.Config{}))
	m.Observe(wrap.CallEvent{Tool: "charge", Outcome: "executed"})
	m.SessionOpened()
	m.HTTP("POST", 200)
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range fams {
		if n := f.GetName(); strings.HasPrefix(n, gatewaymetrics.Namespace+"_") {
			exported[n] = true
			if rows[n] == "" {
				t.Errorf("%s is exported but not in docs/gateway.md's Metrics table", n)
			}
		}
	}
	for n := range rows {
		if !exported[n] {
			t.Errorf("docs/gateway.md names %s, which a gateway does not export", n)
		}
	}

	calls := rows["effectfence_tool_calls_total"]
	if got := listAfter(t, calls, "`outcome`: ", ";"); !sameSet(got, gatewaymetrics.Outcomes) {
		t.Errorf("docs list outcomes %v, the metric's are %v", got, gatewaymetrics.Outcomes)
	}
	codes := listAfter(t, calls, "`code`: ", " |")
	var docCodes []string
	for _, c := range codes {
		c = strings.TrimPrefix(c, "or one of the fence's codes (")
		c = strings.TrimSuffix(c, ")")
		docCodes = append(docCodes, c)
	}
	if want := append([]string{gatewaymetrics.NoCode}, gatewaymetrics.Codes...); !sameSet(docCodes, want) {
		t.Errorf("docs list codes %v, the metric's are %v", docCodes, want)
	}
	var results []string
	for _, f := range fams {
		if f.GetName() != "effectfence_fence_attempts_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				results = append(results, l.GetValue())
			}
		}
	}
	if got := listAfter(t, rows["effectfence_fence_attempts_total"], "`result`: ", " ("); !sameSet(got, results) {
		t.Errorf("docs list results %v, the metric's are %v", got, results)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}
