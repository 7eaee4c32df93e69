package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/internal/syncbuf"
)

// --listen localhost:PORT is taken for a loopback listener, which may serve without keys; the
// hosts file decides where the name binds. The real binary runs in a mount namespace of its
// own whose /etc/hosts maps localhost to one of this machine's other addresses: it refuses to
// serve, naming the address, rather than serving every host that reaches that address without
// keys. Before, it listened there with no key asked. 127.0.0.1 alongside is the control.
func TestListenLocalhostMappedElsewhereIsRefused(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root to mount a hosts file in a namespace of its own (unshare)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("skipped: the unshare command is not installed")
	}
	var other net.IP
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			other = n.IP
			break
		}
	}
	if other == nil {
		t.Skip("skipped: this machine has no address but loopback")
	}
	bin := effectfence(t)
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte(other.String()+" localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		listen string
		serves bool
	}{{"localhost:0", false}, {"127.0.0.1:0", true}} {
		cmd := exec.Command(unshare, "--mount", "--propagation", "private", "--", "sh", "-c", `mount --bind "$H" /etc/hosts && exec "$@"`,
			"sh", bin, "wrap", "--ledger", "memory", "--listen", c.listen, "--", bin, "demo-server")
		cmd.Env = append(os.Environ(), "H="+hosts, "NO_COLOR=1", "EFFECTFENCE_API_KEYS=")
		errb := &syncbuf.Buffer{}
		cmd.Stderr = errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var exited bool
		deadline := time.Now().Add(time.Minute)
		for !exited && !strings.Contains(errb.String(), "listening on") && time.Now().Before(deadline) {
			select {
			case <-done:
				exited = true
			case <-time.After(50 * time.Millisecond):
			}
		}
		if !exited {
			_ = cmd.Process.Kill()
			<-done
		}
		log := errb.String()
		switch {
		case c.serves && !strings.Contains(log, "listening on http://127.0.0.1:"):
			t.Fatalf("--listen %s: did not serve\n%s", c.listen, log)
		case !c.serves && strings.Contains(log, "listening on"):
			t.Fatalf("--listen %s with localhost mapped to %s: served without keys\n%s", c.listen, other, log)
		case !c.serves && (!exited || !strings.Contains(log, "which is not a loopback address") || !strings.Contains(log, other.String())):
			t.Fatalf("--listen %s with localhost mapped to %s: want a refusal naming the address\n%s", c.listen, other, log)
		}
	}
}
