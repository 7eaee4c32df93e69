package probe_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/cmdtest"
	"github.com/effectfence/effectfence/pkg/probe"
)

// TestProbeServerDiesMidRun: two calls answered differently, then the server died. The two
// answers prove a double-fire (exit 3) and the unanswered calls are transport failures whose
// execution the report calls unknown, not refusals and not answers.
func TestProbeServerDiesMidRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "effects.log")
	// Answers its first two calls with different texts, a line per call in $EFFECTS, and
	// exits on the third: a server that dies mid-run.
	srv := shServer(t, dir, "dies.sh", `      echo run >> "$EFFECTS"
      [ "$n" -gt 2 ] && exit 0
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"run %s"}]}}\n' "$id" "$n"`)
	r := cmdtest.Run(t, []string{"EFFECTS=" + log}, bin, "probe", "--json", "--tool", "t", "--calls", "5",
		"--witness", fmt.Sprintf("cat %q 2>/dev/null | wc -l", log), "--witness-kind", "executions", "--", srv)
	rep := probeJSON(t, r)
	if r.Code != 3 || rep.Verdict != probe.DoubleFire || rep.Succeeded != 2 || rep.Distinct != 2 || rep.TransportFailures != 3 ||
		rep.ToolErrors+rep.ProtocolErrors != 0 || rep.Witness == nil || rep.Witness.Effects != 3 ||
		!strings.Contains(strings.Join(rep.Notes, " "), "3 call(s) got no answer (transport failure): whether they executed is unknown") {
		t.Fatalf("exit %d, report %+v witness %+v\nstderr:\n%s", r.Code, rep, rep.Witness, r.Stderr)
	}
}

// TestProbeRealMemoryServerStateWitness probes @modelcontextprotocol/server-memory from npm:
// identical create_entities calls at once each read the graph before any of them wrote it, so
// the tool runs several times and leaves one entity behind. A witness reading the entities is
// state: the probe reports it, but must never turn that single change into EXACTLY ONCE.
func TestProbeRealMemoryServerStateWitness(t *testing.T) {
	t.Parallel()
	memory, err := filepath.Abs("../../.peers/node_modules/.bin/mcp-server-memory")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(memory); err != nil {
		t.Skip("@modelcontextprotocol/server-memory is not installed in .peers (run scripts/install-peers; scripts/test does)")
	}
	graph := filepath.Join(t.TempDir(), "memory.jsonl")
	witness := fmt.Sprintf(`grep -c '"type":"entity"' %q 2>/dev/null || echo 0`, graph)
	r := cmdtest.Run(t, []string{"MEMORY_FILE_PATH=" + graph}, bin, "probe", "--json", "--tool", "create_entities",
		"--args", `{"entities":[{"name":"order-7","entityType":"order","observations":["paid"]}]}`, "--calls", "8",
		"--witness", witness, "--", memory)
	rep := probeJSON(t, r)
	if rep.Succeeded != 8 || rep.Witness == nil || rep.Witness.Kind != probe.State || rep.Witness.Effects != 1 ||
		rep.Verdict == probe.OnceMeasured || strings.Contains(rep.Headline, "ONCE") ||
		!strings.Contains(strings.Join(rep.Notes, " "), "does not show the tool ran once") {
		t.Fatalf("exit %d, report %+v witness %+v\nstderr:\n%s", r.Code, rep, rep.Witness, r.Stderr)
	}
	if (rep.Verdict == probe.DoubleFire) != (r.Code == 3) || (rep.Verdict == probe.Inconclusive) != (r.Code == 0) {
		t.Fatalf("verdict %s with exit %d", rep.Verdict, r.Code)
	}
}
