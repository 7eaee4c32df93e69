package ship

import (
	"os"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// TestGatewayExampleKeepsEachReplicasSpool: an outcome a replica could not record (the
// ledger away when the call ended, or at its stop) waits in its spool, under
// $HOME/.local/state/effectfence (docs/postgres.md), and is recorded "by the next process on
// this host". In the example each replica's home must therefore outlive its container: a
// `docker compose up -d` with a new image (a rolling update) or `down`/`up` recreates the
// containers, and a spool kept in the container's own layer is thrown away with it, the
// outcome lost (the intent fenced unknown for ever, its duplicates refused instead of
// replayed). Before, no replica had a volume: the Dockerfile's "mount a volume there, or use
// --ledger postgres://..." read as if a PostgreSQL ledger needed none.
func TestGatewayExampleKeepsEachReplicasSpool(t *testing.T) {
	b, err := os.ReadFile("../../examples/gateway/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Command []string `yaml:"command"`
			Volumes []string `yaml:"volumes"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	sources := map[string]string{}
	replicas := 0
	for name, s := range compose.Services {
		if len(s.Command) == 0 || s.Command[0] != "wrap" {
			continue
		}
		replicas++
		source := ""
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && (parts[1] == "/home/nonroot" || strings.HasPrefix("/home/nonroot/.local/state/effectfence", parts[1]+"/")) {
				source = parts[0]
			}
		}
		if source == "" {
			t.Errorf("replica %s keeps its spool (/home/nonroot/.local/state/effectfence) in its container: volumes %q", name, s.Volumes)
			continue
		}
		if _, ok := compose.Volumes[source]; !ok {
			t.Errorf("replica %s mounts %q, which is no named volume of compose.yaml", name, source)
		}
		if other, ok := sources[source]; ok {
			t.Errorf("replicas %s and %s share the volume %q", other, name, source)
		}
		sources[source] = name
	}
	if replicas < 2 {
		t.Fatalf("found %d gateway replicas in compose.yaml", replicas)
	}
}
