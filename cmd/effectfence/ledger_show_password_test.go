package main

import (
	"net/url"
	"strings"
	"testing"
)

// docs/ledger.md: the commands `ledger show` suggests name the ledger it was given with
// --ledger, "a PostgreSQL URL as shown, its password to put back". The output said nothing of
// it: the URL's password is written xxxxx, and the suggested resolve, pasted, failed to log
// in. It now says that the password must be put back; the password is never shown.
func TestShowSaysTheLedgerPasswordIsLeftOut(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	u, err := url.Parse(pgLedger(t))
	if err != nil {
		t.Fatal(err)
	}
	const password = "pw-never-shown-4412"
	u.User = url.UserPassword(u.User.Username(), password)
	loc := u.String()
	seedCLI(t, loc)
	code, out, errOut := runCLI(t, "", "ledger", "show", "refund:9", "--ledger", loc)
	if code != 0 || !strings.Contains(out, "effectfence ledger resolve refund:9 --ledger 'postgres://") {
		t.Fatalf("ledger show: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, password) {
		t.Fatalf("ledger show shows the password:\n%s", out)
	}
	if !strings.Contains(out, "xxxxx") || !strings.Contains(out, "put the password back") {
		t.Fatalf("ledger show names the ledger without its password and does not say so:\n%s", out)
	}
}

// TestShowForSaysTheLedgerPasswordIsLeftOut: with --for, the ledger can be EFFECTFENCE_LEDGER's
// (or a policy's), a PostgreSQL URL with a password; the commands show suggests name it with
// --ledger, its password written xxxxx, and said nothing of it: the note looked only at
// --ledger, which --for excludes.
func TestShowForSaysTheLedgerPasswordIsLeftOut(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv(envPolicy, "")
	u, err := url.Parse(pgLedger(t))
	if err != nil {
		t.Fatal(err)
	}
	const password = "pw-never-shown-5127"
	u.User = url.UserPassword(u.User.Username(), password)
	loc := u.String()
	seedCLI(t, loc)
	t.Setenv("EFFECTFENCE_LEDGER", loc)
	code, out, errOut := runCLI(t, "", "ledger", "show", "refund:9", "--for", "--", "some-mcp-server")
	if code != 0 || !strings.Contains(out, "effectfence ledger resolve refund:9 --ledger 'postgres://") {
		t.Fatalf("ledger show --for: exit %d\n%s\n%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, password) {
		t.Fatalf("ledger show shows the password:\n%s", out)
	}
	if !strings.Contains(out, "xxxxx") || !strings.Contains(out, "put the password back") {
		t.Fatalf("ledger show --for names the ledger without its password and does not say so:\n%s", out)
	}
}
