package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestReadmeLeaseAndResultSeconds holds the README's ledger paragraph: EFFECTFENCE_LEASE_SECS
// and EFFECTFENCE_RESULT_TTL_SECS (and the flags that win over them) take seconds from 1 up to
// 30 days (lease) or 366 days (results), and anything else, the values it names included, is
// a usage error, for wrap and for serve alike. The bounds and the bad values are read from the
// README.
func TestReadmeLeaseAndResultSeconds(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	m := docDefault(t, "../../README.md", "(?s)Both\\s+take seconds from 1 up to (\\d+ days \\(lease\\) or \\d+ days \\(results\\); anything else \\([^)]*\\)) is a usage error")
	parts := regexp.MustCompile(`^(\d+) days \(lease\) or (\d+) days \(results\); anything else \((.*)\)$`).FindStringSubmatch(strings.Join(strings.Fields(m[0]), " "))
	if parts == nil {
		t.Fatalf("cannot read the bounds from %q", m[0])
	}
	leaseDays, _ := strconv.Atoi(parts[1])
	ttlDays, _ := strconv.Atoi(parts[2])
	var bad []string
	for _, v := range regexp.MustCompile("`([^`]*)`").FindAllStringSubmatch(parts[3], -1) {
		bad = append(bad, v[1])
	}
	if len(bad) == 0 {
		t.Fatalf("the README names no bad value in %q", parts[3])
	}
	for _, s := range []struct {
		env, flag string
		days      int
	}{{store.EnvLeaseSecs, "--lease-secs", leaseDays}, {store.EnvTTLSecs, "--result-ttl-secs", ttlDays}} {
		max := strconv.Itoa(s.days * 86400)
		over := strconv.Itoa(s.days*86400 + 1)
		for _, cmd := range [][]string{{"serve", "--ledger", "memory"}, {"wrap", "--ledger", "memory"}} {
			run := func(v string, viaEnv bool) (int, string) {
				t.Helper()
				args := append([]string{}, cmd...)
				if viaEnv {
					t.Setenv(s.env, v)
				} else {
					t.Setenv(s.env, "")
					args = append(args, s.flag+"="+v)
				}
				if cmd[0] == "wrap" {
					args = append(args, "--", "true")
				}
				code, stdout, stderr := runCLI(t, "", args...)
				if stdout != "" {
					t.Errorf("%v: wrote to stdout: %q", args, stdout)
				}
				return code, stderr
			}
			for _, viaEnv := range []bool{true, false} {
				for _, v := range []string{"1", max} {
					if code, stderr := run(v, viaEnv); code != exitOK {
						t.Errorf("%s %s=%s (env %v): exit %d, %s; the README says it is taken", cmd[0], s.flag, v, viaEnv, code, stderr)
					}
				}
				for _, v := range append([]string{over, "0"}, bad...) {
					if code, stderr := run(v, viaEnv); code != exitUsage || !strings.Contains(stderr, "want a number of seconds") {
						t.Errorf("%s %s=%s (env %v): exit %d, %s; the README says it is a usage error", cmd[0], s.flag, v, viaEnv, code, stderr)
					}
				}
			}
		}
	}
}
