//go:build linux

package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/effectfence/effectfence/internal/netcut"
	"github.com/effectfence/effectfence/pkg/fence"
)

// netHole is a real network between this process and the test's PostgreSQL server: the
// store's connections leave through a veth pair into a router namespace, which forwards them
// through a second pair into a namespace where a forwarder to the server listens. blackhole
// turns the router's forwarding off, and from then on it drops every packet either way without
// a word (no reset, no ICMP error), as a partition, a NAT or a firewall that lost a flow's
// state, or a failover that moved the server's address away does: this process's kernel
// retransmits what it sent, never acknowledged. A user-space proxy that stops forwarding
// cannot show that, as its kernel acknowledges what the store sends.
type netHole struct {
	router, server string // the namespaces' names
	addr           string // the forwarder's host:port, reached through the router
}

// newNetHole builds the network in front of upstream (host:port of the test's server). It
// needs root, ip(8) and network namespaces, and skips the test saying which is missing.
func newNetHole(t *testing.T, upstream string) *netHole {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP-REQUIRED: a black-holed network needs root (network namespaces, veth pairs)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("SKIP-REQUIRED: a black-holed network needs ip(8) (iproute2)")
	}
	pid := os.Getpid()
	h := &netHole{router: fmt.Sprintf("efhole-r-%d", pid), server: fmt.Sprintf("efhole-s-%d", pid)}
	// Two /30 networks of 10.213.0.0/16 chosen by the pid, so that two test processes at once
	// do not share an address in this namespace.
	base := pid % 8192 * 8
	ip := func(n int) string { return fmt.Sprintf("10.213.%d.%d", (base+n)>>8, (base+n)&255) }
	near, far := fmt.Sprintf("efh%da", pid), fmt.Sprintf("efh%db", pid)
	inner, server := fmt.Sprintf("efh%dc", pid), fmt.Sprintf("efh%dd", pid)
	run := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("netns", "add", h.router); err != nil {
		t.Skipf("SKIP-REQUIRED: a black-holed network needs network namespaces: %v", err)
	}
	t.Cleanup(func() {
		_ = run("link", "del", near)
		_ = run("netns", "del", h.router)
		_ = run("netns", "del", h.server)
	})
	if err := run("link", "add", near, "type", "veth", "peer", "name", far, "netns", h.router); err != nil {
		t.Skipf("SKIP-REQUIRED: a black-holed network needs veth pairs: %v", err)
	}
	for _, args := range [][]string{
		{"netns", "add", h.server},
		{"-n", h.router, "link", "add", inner, "type", "veth", "peer", "name", server, "netns", h.server},
		{"addr", "add", ip(1) + "/30", "dev", near},
		{"link", "set", near, "up"},
		{"-n", h.router, "addr", "add", ip(2) + "/30", "dev", far},
		{"-n", h.router, "link", "set", far, "up"},
		{"-n", h.router, "addr", "add", ip(5) + "/30", "dev", inner},
		{"-n", h.router, "link", "set", inner, "up"},
		{"-n", h.server, "addr", "add", ip(6) + "/30", "dev", server},
		{"-n", h.server, "link", "set", server, "up"},
		{"route", "add", ip(4) + "/30", "via", ip(2)},
		{"-n", h.server, "route", "add", "default", "via", ip(5)},
	} {
		if err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	h.forwarding(t, true)
	ln := listenIn(t, h.server, net.JoinHostPort(ip(6), "0"))
	h.addr = ln.Addr().String()
	fw := netcut.Serve(ln, upstream)
	t.Cleanup(fw.Close)
	return h
}

// forwarding turns the router's IPv4 forwarding on or off.
func (h *netHole) forwarding(t *testing.T, on bool) {
	t.Helper()
	v := "0"
	if on {
		v = "1"
	}
	if out, err := exec.Command("ip", "netns", "exec", h.router, "sh", "-c", "echo "+v+" > /proc/sys/net/ipv4/ip_forward").CombinedOutput(); err != nil {
		t.Fatalf("router forwarding %s: %v: %s", v, err, out)
	}
}

// blackhole drops every packet of every connection through the network, either way.
func (h *netHole) blackhole(t *testing.T) { h.forwarding(t, false) }

// heal carries them again.
func (h *netHole) heal(t *testing.T) { h.forwarding(t, true) }

// url is the test server's URL through the network.
func (h *netHole) url(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = h.addr
	return u.String()
}

// listenIn listens on addr inside the network namespace ns. The socket is made by a thread
// that joined ns and ends with it; the socket stays in ns, and the process's other threads
// (the forwarder's dials) stay where they are.
func listenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	type result struct {
		ln  net.Listener
		err error
	}
	got := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			got <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			got <- result{err: fmt.Errorf("setns %s: %w", ns, err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		got <- result{ln, err}
	}()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.ln
}

// TestClaimOverABlackholedNetworkEnds: the network between a store and its server drops every
// packet, without a reset, after the pool has connected. A claim (with no deadline of its
// own, as wrap's) must be refused with a store error once what it sent has gone
// unacknowledged for a third of the lease (TCP_USER_TIMEOUT), and admitted once the network
// carries packets again. Before, it waited while the kernel retransmitted, about 15 min under
// Linux's defaults, and the call it held was admitted whenever the network came back (where
// the server had run the claim and only its answer was held, with its lease running since,
// perhaps lapsed and the call taken over by another process).
func TestClaimOverABlackholedNetworkEnds(t *testing.T) {
	h := newNetHole(t, pgHost(t))
	schema := testSchema(t)
	const lease = 3 * time.Second // a connection is given up after 1 s unacknowledged
	// The store bounds a connect to a third of the lease when the URL sets none (1 s here):
	// under CI's load a connect through the namespaces and the test's forwarder once took
	// longer, so the first connect is tried again (what is under test comes after it).
	octx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	s, err := Open(octx, Config{URL: h.url(t), Schema: schema, MaxConns: 2, Lease: lease})
	for try := 1; err != nil && try < 5 && octx.Err() == nil && strings.Contains(err.Error(), "timeout"); try++ {
		t.Logf("connect %d through the network: %v", try, err)
		s, err = Open(octx, Config{URL: h.url(t), Schema: schema, MaxConns: 2, Lease: lease})
	}
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	e := fence.New(s, fence.Config{LeaseTTL: lease})
	ctx := context.Background()
	through := fence.Request{Intent: "blackholed:before", Tool: "charge", Args: []byte(`{"usd":1}`)}
	adm, err := e.Prepare(ctx, through)
	if err != nil || !adm.Fresh() {
		t.Fatalf("a claim through the network: %+v %v", adm, err)
	}
	if _, err := e.Commit(ctx, *adm.Ticket, []byte(`"ok"`)); err != nil {
		t.Fatal(err)
	}
	h.blackhole(t)
	r := fence.Request{Intent: "blackholed:claim", Tool: "charge", Args: []byte(`{"usd":2}`)}
	answered := make(chan error, 1)
	go func() {
		adm, err := e.Prepare(ctx, r)
		if err == nil {
			err = fmt.Errorf("admitted: %+v", adm)
		}
		answered <- err
	}()
	// Far more than the few seconds a refusal takes; far less than the kernel's retransmission.
	const patience = 2 * time.Minute
	select {
	case err := <-answered:
		if fence.CodeOf(err) != fence.CodeStore || errors.Is(err, fence.ErrInFlight) {
			t.Fatalf("a claim over the black-holed network answered %v; want a store error", err)
		}
		t.Logf("refused: %v", err)
	case <-time.After(patience):
		t.Fatalf("a claim over the black-holed network was not answered in %s (the lease is %s)", patience, lease)
	}
	h.heal(t)
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	adm, err = e.Prepare(rctx, r)
	if err != nil || !adm.Fresh() {
		t.Fatalf("the claim once the network carries packets again: %+v %v", adm, err)
	}
}
