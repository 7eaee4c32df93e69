//go:build unix

package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The commands a fenced call names (resolve, clear) carry the ledger as wrap shows it: a
// PostgreSQL URL with its password written xxxxx, which pasted as it is fails to log in. So
// they say that the password of the URL wrap was given must be put back (clearHint). A fleet
// replica given its ledger with a password (EFFECTFENCE_LEDGER in docs/gateway.md's recipe)
// left that note out: the URL it was handed was already the shown one, and the command read as
// complete. The password itself is never in the answer.
func TestFencedCallsCommandSaysThePasswordWasLeftOut(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(pgLedger(t))
	if err != nil {
		t.Fatal(err)
	}
	const password = "pw-never-shown-7731"
	if _, has := u.User.Password(); !has {
		u.User = url.UserPassword(u.User.Username(), password)
	}
	secret, _ := u.User.Password()
	check, _ := url.Parse(os.Getenv("EFFECTFENCE_TEST_POSTGRES"))
	check.User = u.User
	if conn, err := pgx.Connect(context.Background(), check.String()); err != nil {
		t.Skipf("SKIP-REQUIRED: the test server refuses the URL with a password: %v", err)
	} else {
		conn.Close(context.Background())
	}
	effects := filepath.Join(t.TempDir(), "effects")
	g := startGateway(t, "--ledger", u.String(), "--scope", "pw", "--grace", "1s", "--listen", "127.0.0.1:0",
		"--", effectfence(t), "demo-server", "--latency", "10m", "--effects", effects)
	held := g.postAsync(g.initialize(t), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"charge_card","arguments":{"amount":4900,"customer":"cus_pw"}}}`)
	waitInFlight(t, u.String(), g) // admitted, so inside the server (latency 10 m)
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var got string
	select {
	case got = <-held:
	case <-time.After(time.Minute):
		t.Fatalf("the call cut by the stop got no answer\n%s", g.logText())
	}
	if !strings.Contains(got, "ledger clear") {
		t.Fatalf("the call cut by the stop was answered %s; want the commands that settle it\n%s", got, g.logText())
	}
	if strings.Contains(got, secret) || strings.Contains(g.logText(), secret) {
		t.Fatalf("the password is in the answer or the log:\n%s\n%s", got, g.logText())
	}
	if !strings.Contains(got, "xxxxx@") || !strings.Contains(got, "with the password of the URL wrap was given") {
		t.Fatalf("the commands name the ledger without its password and do not say so: %s", got)
	}
}
