package main

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGatewayBoundsAsDocumented: the gateway's bounds that have no flag, and --max-conns's
// default, are docs/gateway.md's: headers within 10 s, a keep-alive connection idle for 2
// minutes closed, /healthz's ledger query bounded at 2 s, and at most half the open-file limit
// of client connections (10,000 where there is none).
func TestGatewayBoundsAsDocumented(t *testing.T) {
	const gw = "../../docs/gateway.md"
	for _, c := range []struct {
		what    string
		code    time.Duration
		pattern string
	}{
		{"headers", headerTimeout, `A request's headers must arrive within ([0-9]+ s)`},
		{"keep-alive idle", connIdle, `connection idle for ([0-9]+ minutes) between requests is closed`},
		{"/healthz's query", healthTimeout, `its ledger answers \(a ([0-9]+ s) query\)`},
	} {
		if want := docSeconds(t, gw, c.pattern); c.code != want {
			t.Errorf("%s: the gateway's bound is %v; docs/gateway.md says %v", c.what, c.code, want)
		}
	}
	v := docDefault(t, gw, "`ulimit -n`, which Go raises to the hard limit at start; ([0-9,]+) where there is none\\)")
	if want := strings.ReplaceAll(v[0], ",", ""); want != strconv.Itoa(maxConnsWithoutLimit) {
		t.Errorf("--max-conns without an open-file limit is %d; docs/gateway.md says %s", maxConnsWithoutLimit, v[0])
	}
	docDefault(t, gw, "`--max-conns N` \\| the most client connections open at once \\(default: (half) the process's open-file limit")
	if n := openFileLimit(); n > 0 && defaultMaxConns() != n/2 {
		t.Errorf("--max-conns defaults to %d with an open-file limit of %d; docs/gateway.md says half", defaultMaxConns(), n)
	}
}
