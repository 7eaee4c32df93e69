package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

func startTicksOf(t *testing.T, pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		t.Skip(err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	n, _ := strconv.ParseInt(f[19], 10, 64)
	return n
}

// TestShowOfAFailedClaimWhoseCarrierRuns: `ledger show` says `clear` and `resolve
// --did-not-happen` are refused for every fenced record (failed too) of a gone holder whose
// carrier runs, but only a claim that can still heal is held (SilentHolder): a failed one is
// cleared. The show's words must match what clear does.
func TestShowOfAFailedClaimWhoseCarrierRuns(t *testing.T) {
	me := strings.Split(fence.LocalOwner(), "/")
	if len(me) != 5 {
		t.Skip("no five-field owner here")
	}
	offset := startTicksOf(t, "self") - func() int64 { n, _ := strconv.ParseInt(me[2], 10, 64); return n }()
	h := exec.Command("sleep", "60")
	if err := h.Start(); err != nil {
		t.Skip(err)
	}
	hs := startTicksOf(t, strconv.Itoa(h.Process.Pid)) - offset
	_ = h.Process.Kill()
	_ = h.Wait()
	gone := strings.Join([]string{me[0], strconv.Itoa(h.Process.Pid), strconv.FormatInt(hs, 10), me[3], me[4]}, "/")
	if fence.OwnerLiveness(gone) != fence.Dead {
		t.Skip("cannot make a gone holder here")
	}
	g := exec.Command("sleep", "60")
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.Start(); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { _ = g.Process.Kill(); _ = g.Wait() })
	carrier := fence.GroupCarrier(g.Process.Pid)
	if carrier == "" {
		t.Skip("no carrier here")
	}

	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "l.db")
	l, err := store.Open(ctx, store.Options{Ledger: path})
	if err != nil {
		t.Fatal(err)
	}
	holder := fence.New(l.Store(), fence.Config{Owner: gone})
	adm, err := holder.Prepare(ctx, fence.Request{Intent: "pay", Tool: "t", Args: []byte(`{}`), Carrier: carrier})
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Abort(ctx, *adm.Ticket, "the server said no"); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()

	_, out, _ := runCLI(t, "", "ledger", "show", "pay", "--ledger", path)
	t.Logf("show:\n%s", out)
	saysRefused := strings.Contains(out, "are refused")
	code, _, stderr := runCLI(t, "", "ledger", "clear", "pay", "--reason", "checked", "--ledger", path)
	if saysRefused && code == 0 {
		t.Fatalf("show says clear is refused (and that the effect may still finish) for a failed record; clear went through: %s", stderr)
	}
}
