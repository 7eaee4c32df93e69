package wrap

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// TestLimitsAsDocumented: the bounds docs/wrap.md and docs/RELIABILITY.md state in words for
// tasks, the server's requests to the agent and the on_unknown hook are the unexported values
// wrap uses (the tests of tasks and hooks take them by name, so a changed value would pass
// there).
func TestLimitsAsDocumented(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile("../../" + path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(strings.Fields(string(b)), " ") // one space where the doc wraps a line
	}
	wrapMD, reliab := read("docs/wrap.md"), read("docs/RELIABILITY.md")
	stated := func(doc, name, pattern string) string {
		t.Helper()
		m := regexp.MustCompile(pattern).FindStringSubmatch(doc)
		if m == nil {
			t.Fatalf("%s: the doc no longer states it (no match of %q)", name, pattern)
		}
		return m[1]
	}
	words := map[string]time.Duration{"a minute": time.Minute, "a day": 24 * time.Hour, "a week": 7 * 24 * time.Hour}
	count := func(s string) int {
		n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		name    string
		code    time.Duration
		doc     string
		pattern string
	}{
		{"taskGrace", taskGrace, wrapMD, `as long as the server keeps it \(the task's ttl\) and (a minute) more`},
		{"taskWaitMax", taskWaitMax, wrapMD, `or (a week) for a task without a ttl`},
		{"maxLocalTaskTTL", maxLocalTaskTTL, wrapMD, `for the ttl asked \(at most (a day)\)`},
		{"requestWait", requestWait, wrapMD, `A line from the agent that finds no room within (a minute) is skipped unread`},
	} {
		if v := stated(c.doc, c.name, c.pattern); words[v] != c.code {
			t.Errorf("%s is %v; the doc says %q", c.name, c.code, v)
		}
	}
	if v := stated(wrapMD, "maxLocalTasks", `wrap keeps the last ([0-9,]+) such tasks`); count(v) != maxLocalTasks {
		t.Errorf("maxLocalTasks is %d; docs/wrap.md says %s", maxLocalTasks, v)
	}
	if v := stated(wrapMD, "taskReasks", `([0-9]+) such losses in a row, ([0-9]+) s apart doubling to (a minute)`); count(v) != taskReasks {
		t.Errorf("taskReasks is %d; docs/wrap.md says %s", taskReasks, v)
	}
	if m := regexp.MustCompile(`such losses in a row, ([0-9]+) s apart`).FindStringSubmatch(wrapMD); m == nil || time.Duration(count(m[1]))*time.Second != taskReaskDelay {
		t.Errorf("taskReaskDelay is %v; docs/wrap.md says %v", taskReaskDelay, m)
	}
	if v := stated(wrapMD, "maxLocalTaskBytes", `their results together at most ([0-9]+) MiB`); count(v)<<20 != maxLocalTaskBytes {
		t.Errorf("maxLocalTaskBytes is %d; docs/wrap.md says %s MiB", maxLocalTaskBytes, v)
	}
	if v := stated(wrapMD, "mcpstdio.MaxInbound", `At most ([0-9,]+) wait for the agent at once`); count(v) != mcpstdio.MaxInbound {
		t.Errorf("mcpstdio.MaxInbound is %d; docs/wrap.md says %s", mcpstdio.MaxInbound, v)
	}
	if v := stated(reliab, "hookQueue", `events wait in a queue of ([0-9]+) for one worker`); count(v) != hookQueue {
		t.Errorf("hookQueue is %d; docs/RELIABILITY.md says %s", hookQueue, v)
	}
	if v := stated(reliab, "maxHookBackoff", `backoff from [0-9]+ ms doubling to ([0-9]+) s\)`); time.Duration(count(v))*time.Second != maxHookBackoff {
		t.Errorf("maxHookBackoff is %v; docs/RELIABILITY.md says %s s", maxHookBackoff, v)
	}
}

// TestHeartbeatEveryThirdOfTheLease: a fenced call's heartbeat renews its lease as often as
// docs/wrap.md says ("renews its lease every third of it"), for the default lease and
// another. TestWaitAndGraceInForce holds it from outside: a real wrap's first renewal comes
// no sooner.
func TestHeartbeatEveryThirdOfTheLease(t *testing.T) {
	b, err := os.ReadFile("../../docs/wrap.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`wrap renews its lease every (third|half|quarter) of it`).FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/wrap.md no longer says how often wrap renews a lease")
	}
	parts := map[string]time.Duration{"half": 2, "third": 3, "quarter": 4}[string(m[1])]
	for _, lease := range []time.Duration{0, 9 * time.Second} {
		p := &Proxy{opt: Options{Engine: fence.New(fence.NewMemoryStore(), fence.Config{LeaseTTL: lease})}}
		beats := p.heartbeat(fence.Ticket{})
		beats.stop()
		ttl := p.opt.Engine.Config().LeaseTTL
		if beats.every != ttl/parts {
			t.Errorf("with a lease of %v the heartbeat comes every %v; docs/wrap.md says every %s of it", ttl, beats.every, m[1])
		}
	}
}
