package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusedLedgerURLNotQuotedWithItsPassword: docs/privacy.md, wrap's log "never holds ... a
// ledger URL's password". A ledger string wrap refuses at start (a scheme it does not read,
// such as SQLAlchemy's postgresql+psycopg2:// or a typo; POSTGRES:// in capitals; white space
// pasted around it, a trailing newline from an env file) is still a connection string with
// the database's password in it. The refusal, on wrap's stderr (and on the ledger commands'
// and in a policy's error), says why and never quotes the password. Before, it quoted the
// whole string.
func TestRefusedLedgerURLNotQuotedWithItsPassword(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, ledger, secret, want string }{
		{"sqlalchemy scheme", "postgresql+psycopg2://app:PWs3cretLA@db.example/ledger", "PWs3cretLA", "not a supported scheme"},
		{"typo scheme", "postgress://app:PWs3cretLB@db.example/ledger", "PWs3cretLB", "not a supported scheme"},
		{"capitals", "POSTGRES://app:PWs3cretLC@db.example/ledger", "PWs3cretLC", "lower case"},
		{"leading space", " postgres://app:PWs3cretLD@db.example/ledger", "PWs3cretLD", "white space"},
		{"trailing newline, password in the query", "postgres://app@db.example/ledger?password=PWs3cretLE\n", "PWs3cretLE", ""}, // refused later, by pgx or the policy
		{"no scheme slashes", "app:PWs3cretLF@db.example/ledger", "PWs3cretLF", "not a supported scheme"},
		// The parameter's name percent-encoded, as pgx and libpq decode it: no "password" in
		// the text, and before 2026-12-06 it was quoted whole.
		{"capitals, an encoded password=", "Postgres://db.example/ledger?pass%77ord=PWs3cretLG", "PWs3cretLG", "lower case"},
		{"colon lost, an encoded password=", "postgres//db.example/ledger?%70%61ssword=PWs3cretLH", "PWs3cretLH", "colon of the scheme"},
		{"leading space, an encoded PASSWORD=", " postgres://db.example/ledger?%50ASSWORD=PWs3cretLI", "PWs3cretLI", "white space"},
		{"sqlalchemy scheme, an encoded sslpassword=", "postgresql+psycopg2://db.example/ledger?sslpass%57ord=PWs3cretLJ", "PWs3cretLJ", "not a supported scheme"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pol := filepath.Join(dir, "policy.yaml")
			if err := os.WriteFile(pol, []byte("version: 1\nledger: \""+strings.ReplaceAll(c.ledger, "\n", `\n`)+"\"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			env := []string{"NO_COLOR=1", "XDG_STATE_HOME=" + dir}
			for what, r := range map[string]result{
				"wrap --ledger":             runBinary(t, env, "", "wrap", "--ledger", c.ledger, "--", "true"),
				"ledger ls, the variable":   runBinary(t, append(env, "EFFECTFENCE_LEDGER="+c.ledger), "", "ledger", "ls"),
				"wrap, the policy's ledger": runBinary(t, env, "", "wrap", "--policy", pol, "--", "true"),
			} {
				if r.code == exitOK || c.want != "" && (r.code != exitUsage || !strings.Contains(r.stderr, c.want)) {
					t.Errorf("%s %q: exit %d; want it refused (a usage error saying %q):\n%s%s", what, c.ledger, r.code, c.want, r.stdout, r.stderr)
				}
				if strings.Contains(r.stdout+r.stderr, c.secret) {
					t.Errorf("%s %q: the refusal shows the ledger's password:\n%s%s", what, c.ledger, r.stdout, r.stderr)
				}
			}
		})
	}
}
