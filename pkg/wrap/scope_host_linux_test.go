package wrap_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

// docs/identity.md: HOSTNAME is left out of the scope ("a container's changes at every
// start"), and so is everything else of the host: neither the host name (the UTS namespace)
// nor the PID namespace is part of a call's identity. A container restarted with a new host
// name keeps its scope, its default ledger file and so its receipts: the same call after the
// restart is replayed, not run. The same holds for what "What the scope cannot see" warns of:
// a server keyed by its host name is handed the other host's receipt. Two real wraps, each in
// UTS and PID namespaces of its own (unshare, as a container runtime makes them) with its own
// host name in the kernel and in HOSTNAME, on the default ledger file.
func TestScopeOutlivesANewHostName(t *testing.T) {
	t.Parallel()
	unshare := needUnshare(t, "UTS and PID namespaces")
	r := newRig(t)
	r.ledger = "" // the default file, named after the scope
	seen := filepath.Join(r.dir, "hostname")
	var logs []string
	for i, host := range []string{"box-a", "box-b"} {
		r.prefix = []string{unshare, "--uts", "--pid", "--fork", "--mount-proc", "--",
			"/bin/sh", "-c", `hostname "$0" && hostname >"$1" && shift && exec "$@"`, host, seen}
		r.extraEnv = []string{"HOSTNAME=" + host}
		w := r.wrap()
		x := call(t, w.Session, "charge", `{"amount":7}`)
		w.Close()
		logs = append(logs, w.log.String())
		if b, err := os.ReadFile(seen); err != nil || strings.TrimSpace(string(b)) != host {
			t.Fatalf("wrap %d did not run under host name %s: %q %v", i, host, b, err)
		}
		if x.IsError || x.replayed() != (i == 1) {
			t.Fatalf("host %s: %q (replayed %v); want the first run and the second replayed: the host is not part of the scope\n%s", host, x.text(), x.replayed(), w.log.String())
		}
	}
	if n := len(mcptest.Effects(r.effects)); n != 1 {
		t.Fatalf("want 1 charge, got %d: %q", n, mcptest.Effects(r.effects))
	}
	scope := func(log string) string {
		_, after, _ := strings.Cut(log, "effectfence wrap: scope ")
		id, _, _ := strings.Cut(after, ":")
		return id
	}
	ledger := func(log string) string {
		_, after, _ := strings.Cut(log, "effectfence wrap: ledger ")
		path, _, _ := strings.Cut(after, ";")
		return path
	}
	if a, b := scope(logs[0]), scope(logs[1]); a == "" || a != b {
		t.Fatalf("the two hosts' scopes: %q and %q", a, b)
	}
	if a, b := ledger(logs[0]), ledger(logs[1]); !strings.Contains(a, "wrap-"+scope(logs[0])) || a != b {
		t.Fatalf("the two hosts' default ledgers: %q and %q", a, b)
	}
}
