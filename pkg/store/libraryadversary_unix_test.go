//go:build unix

package store_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/pgtest"
)

// adversaryProgram is a user's program on the library, as README's quick start uses it: a
// durable ledger from store.Open, Prepare, the effect, Commit. "hold" claims an intent and
// waits for a line on its standard input before it commits; "try" asks once and says what it
// was told, "wait" asks with PrepareWait. Anything admitted but the holder prints ADMITTED.
const adversaryProgram = `package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store"
)

func main() {
	ctx := context.Background()
	lease, err := time.ParseDuration(os.Args[3])
	if err != nil {
		panic(err)
	}
	led, err := store.Open(ctx, store.Options{Ledger: os.Args[1], LeaseTTL: lease})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	defer led.Close()
	req := fence.Request{Intent: os.Args[4], Tool: "charge_card", Args: []byte(` + "`" + `{"amount":4900}` + "`" + `)}
	say := func(adm fence.Admission, err error) {
		var pf fence.PriorFailureError
		switch {
		case errors.As(err, &pf):
			fmt.Printf("%s %s healable=%v\n", fence.CodeOf(err), pf.State, pf.Healable)
		case err != nil:
			fmt.Println(fence.CodeOf(err))
		case adm.Cert != nil:
			fmt.Println("replay", string(adm.Cert.Result))
		default:
			fmt.Println("ADMITTED")
		}
	}
	switch os.Args[2] {
	case "hold":
		adm, err := led.Prepare(ctx, req)
		if err != nil || adm.Ticket == nil {
			say(adm, err)
			os.Exit(1)
		}
		fmt.Println("claimed")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			os.Exit(1)
		}
		if _, err := led.Commit(ctx, *adm.Ticket, []byte(` + "`" + `{"charge":"ch_1"}` + "`" + `)); err != nil {
			fmt.Println("commit:", err)
			os.Exit(1)
		}
		fmt.Println("committed")
	case "panic":
		// The effect panics, and nothing recovers it: the process dies with its claim.
		if _, err := led.Prepare(ctx, req); err != nil {
			os.Exit(1)
		}
		panic("the card processor's client panicked")
	case "recovered":
		// The effect panics and a framework recovers it (as net/http does a handler's): the
		// process goes on, its claim unreported. The client's retry comes to the same process.
		adm, err := led.Prepare(ctx, req)
		if err != nil || adm.Ticket == nil {
			os.Exit(1)
		}
		func() {
			defer func() { _ = recover() }()
			panic("the card processor's client panicked")
		}()
		say(led.PrepareWait(ctx, req, time.Hour))
	case "try":
		say(led.Prepare(ctx, req))
	case "wait":
		say(led.PrepareWait(ctx, req, time.Hour))
	}
}
`

// TestLibraryHolderStoppedOrKilledIsNeverRunAgain: two processes of a user's program on one
// ledger (a real SQLite file; a real PostgreSQL schema), the way README's quick start uses
// the library. A holder stopped (SIGSTOP) past its lease: the other process's PrepareWait ends
// when the lease lapses, refused prior_failure (unknown, healable), and a retry is refused too,
// never admitted; the holder, resumed, commits, which heals the intent, and the next attempt
// replays its result. A holder killed (SIGKILL) while it holds its claim under a lease of a
// minute: the next attempt is refused at once, unknown, not healable (the holder is gone), and
// not admitted either. So is an effect that panics: the process dies with its claim, or
// recovers the panic and goes on, its own retry then waiting for the lease and refused.
func TestLibraryHolderStoppedOrKilledIsNeverRunAgain(t *testing.T) {
	t.Parallel()
	prog := buildUserProgram(t, adversaryProgram)
	for _, ledger := range []string{"sqlite", "postgres"} {
		t.Run(ledger, func(t *testing.T) {
			t.Parallel()
			loc := filepath.Join(t.TempDir(), "ledger.db")
			if ledger == "postgres" {
				loc = pgtest.Ledger(t, "libadv")
			}
			run := func(mode, lease, intent string) string {
				t.Helper()
				out, err := exec.Command(prog, loc, mode, lease, intent).CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s", mode, err, out)
				}
				return strings.TrimSpace(string(out))
			}

			// Stopped past its lease.
			holder, send := startHolder(t, prog, loc, "2s", "charge:stopped")
			if err := holder.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			if out := run("wait", "2s", "charge:stopped"); out != "prior_failure unknown healable=true" {
				t.Fatalf("a wait on a stopped holder's claim: %q; want it refused once the lease lapsed, unknown and healable", out)
			}
			if out := run("try", "2s", "charge:stopped"); out != "prior_failure unknown healable=true" {
				t.Fatalf("an attempt after the lease lapsed under a stopped holder: %q", out)
			}
			if err := holder.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			if out := send("commit"); out != "committed" {
				t.Fatalf("the resumed holder's commit: %q", out)
			}
			if err := holder.Wait(); err != nil {
				t.Fatal(err)
			}
			if out := run("try", "2s", "charge:stopped"); out != `replay {"charge":"ch_1"}` {
				t.Fatalf("after the holder's late commit healed the intent: %q", out)
			}

			// Killed while it holds its claim.
			holder, _ = startHolder(t, prog, loc, "60s", "charge:killed")
			if err := holder.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = holder.Wait()
			if out := run("try", "60s", "charge:killed"); out != "prior_failure unknown healable=false" {
				t.Fatalf("an attempt after the holder was killed: %q; want it refused at once as unknown", out)
			}
			if out := run("wait", "60s", "charge:killed"); out != "prior_failure unknown healable=false" {
				t.Fatalf("a wait after the holder was killed: %q", out)
			}

			// The effect panics. Unrecovered, the process dies with its claim: unknown at once.
			if out, err := exec.Command(prog, loc, "panic", "60s", "charge:panicked").CombinedOutput(); err == nil || !strings.Contains(string(out), "the card processor's client panicked") {
				t.Fatalf("a panicking effect: %v, %s; want the panic to end the process", err, out)
			}
			if out := run("try", "60s", "charge:panicked"); out != "prior_failure unknown healable=false" {
				t.Fatalf("an attempt after the effect panicked and the process died: %q", out)
			}
			// Recovered in the process, which goes on: its own retry waits for the claim's
			// lease and is refused, unknown (healable by a late report), not run again.
			if out := run("recovered", "2s", "charge:recovered"); out != "prior_failure unknown healable=true" {
				t.Fatalf("a retry in the process that recovered its effect's panic: %q", out)
			}
			if out := run("try", "2s", "charge:recovered"); out != "prior_failure unknown healable=false" {
				t.Fatalf("an attempt once that process ended: %q", out)
			}
		})
	}
}

// startHolder starts prog holding intent on ledger loc and returns once it has claimed; send
// writes a line to its standard input and returns the next line it prints.
func startHolder(t *testing.T, prog, loc, lease, intent string) (*exec.Cmd, func(string) string) {
	t.Helper()
	c := exec.Command(prog, loc, "hold", lease, intent)
	c.Stderr = os.Stderr
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Process.Signal(syscall.SIGCONT)
		_ = c.Process.Kill()
	})
	lines := bufio.NewReader(out)
	line := func() string {
		s, _ := lines.ReadString('\n')
		return strings.TrimSpace(s)
	}
	if s := line(); s != "claimed" {
		t.Fatalf("holder: %q", s)
	}
	return c, func(s string) string {
		if _, err := in.Write([]byte(s + "\n")); err != nil {
			t.Fatal(err)
		}
		return line()
	}
}
