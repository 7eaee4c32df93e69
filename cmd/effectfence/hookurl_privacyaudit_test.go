package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyHookURLRefusedWithoutItsSecrets: docs/privacy.md, wrap's log "never holds ... an
// on_unknown webhook's path" (nor, as for every URL it names, the user information or the
// query). A webhook's URL is its secret (https://hooks.slack.com/services/<token>), and a
// policy that gives one wrap refuses (plain http to another machine, another scheme, no host,
// not a URL) is refused at start, on wrap's stderr: the refusal names the file, the line and
// the URL's scheme and host, never the rest of it. Before, it quoted the whole URL.
func TestPolicyHookURLRefusedWithoutItsSecrets(t *testing.T) {
	t.Parallel()
	const inPath, inQuery, inUser = "PATHs3cretHK41", "QUERYs3cretHK42", "USERs3cretHK43"
	for _, c := range []struct{ name, url, want string }{
		{"plain http elsewhere", "http://acct:" + inUser + "@hooks.slack.example/services/T0/B0/" + inPath + "?token=" + inQuery, "http://hooks.slack.example"},
		{"another scheme", "ftp://acct:" + inUser + "@hooks.example/" + inPath + "?token=" + inQuery, "ftp://hooks.example"},
		{"no host", "https:///" + inPath + "?token=" + inQuery, "no host"},
		{"not a URL", "https://hooks.example/" + inPath + "%zz?token=" + inQuery, "not a URL"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pol := filepath.Join(dir, "policy.yaml")
			if err := os.WriteFile(pol, []byte("version: 1\non_unknown:\n  url: "+c.url+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := runBinary(t, []string{"NO_COLOR=1"}, "", "wrap", "--ledger", filepath.Join(dir, "l.db"), "--policy", pol, "--", "true")
			if r.code != exitUsage || !strings.Contains(r.stderr, "policy.yaml:3:") || !strings.Contains(r.stderr, c.want) {
				t.Fatalf("wrap with the hook url %s: exit %d; want a usage error naming the line and %q:\n%s%s", c.url, r.code, c.want, r.stdout, r.stderr)
			}
			for _, secret := range []string{inPath, inQuery, inUser} {
				if strings.Contains(r.stderr+r.stdout, secret) {
					t.Errorf("wrap's refusal shows the webhook URL's %s:\n%s%s", secret, r.stdout, r.stderr)
				}
			}
		})
	}
}
