package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLyingListServerProcess is not a test: it is the MCP server the tests below start
// (os.Args[0] with EFFECTFENCE_TEST_LYINGLIST=mode). Its tools/list misbehaves by mode:
// "cursors" returns a next cursor on every page, forever; "die" exits when asked for its
// tools; "hang" never answers tools/list; "huge" lists a 1 MiB name, a name with invalid
// UTF-8 and escapes, and send_money. Every tools/call appends a line to
// EFFECTFENCE_TEST_LYINGLIST_CALLS, so a test can see that nothing was called.
func TestLyingListServerProcess(t *testing.T) {
	mode := os.Getenv("EFFECTFENCE_TEST_LYINGLIST")
	if mode == "" {
		t.Skip("helper process for the lying tools/list tests")
	}
	page := 0
	answerRequests(func(method string) []byte {
		switch method {
		case "initialize":
			return []byte(`{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"liar","version":"1"}}`)
		case "tools/list":
			switch mode {
			case "die":
				os.Exit(0)
			case "hang":
				return nil
			case "cursors":
				page++
				return fmt.Appendf(nil, `{"tools":[{"name":"send_money","inputSchema":{"type":"object"}}],"nextCursor":"p%d"}`, page)
			case "huge":
				return []byte(`{"tools":[{"name":"` + strings.Repeat("A", 1<<20) + `","inputSchema":{"type":"object"}},` +
					"{\"name\":\"bad\xff\xfe\\u001b]0;pwned\\u0007\",\"inputSchema\":{\"type\":\"object\"}}," +
					`{"name":"send_money","inputSchema":{"type":"object"}}]}`)
			}
			return []byte(`{}`)
		case "tools/call":
			f, err := os.OpenFile(os.Getenv("EFFECTFENCE_TEST_LYINGLIST_CALLS"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err == nil {
				fmt.Fprintln(f, "called")
				f.Close()
			}
			return []byte(`{"content":[{"type":"text","text":"sent"}]}`)
		}
		return []byte(`{}`)
	})
	os.Exit(0)
}

// TestScanRunAndProbeAgainstALyingList: a server whose tools/list never ends, dies, or never
// answers makes `scan --run` exit 1 with a clear line (never an empty list, never a hang past
// --run-timeout) and makes probe exit 1 without calling anything; a list with a 1 MiB name
// and a name of invalid UTF-8 and escapes is reported, escaped, and the real tool is probed.
func TestScanRunAndProbeAgainstALyingList(t *testing.T) {
	t.Parallel()
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	server := []string{self, "-test.run=^TestLyingListServerProcess$"}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "server.ts"), []byte(`server.tool("send_money", "Send money", {}, async () => { await fetch(u, { method: "POST" }) })`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The timeout is the point of "hang" only: 1000 pages from a race-built server took more
	// than 3 s in a loaded CI run, which then failed on the timeout, not the page limit.
	for _, c := range []struct{ mode, timeout, scanErr, probeErr string }{
		{"cursors", "2m", "more than 1000 pages", "more pages"},
		{"die", "2m", "exited", "exited"},
		{"hang", "3s", "did not list its tools within 3s", ""},
	} {
		calls := filepath.Join(t.TempDir(), "calls")
		env := []string{"NO_COLOR=1", "EFFECTFENCE_TEST_LYINGLIST=" + c.mode, "EFFECTFENCE_TEST_LYINGLIST_CALLS=" + calls}
		r := runBinary(t, env, "", append([]string{"scan", src, "--json", "--run", "--run-timeout", c.timeout, "--"}, server...)...)
		if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, c.scanErr) {
			t.Errorf("%s: scan --run = %d, stdout %.300q, stderr %.500q; want exit 1, no report, %q", c.mode, r.code, r.stdout, r.stderr, c.scanErr)
		}
		if c.mode == "hang" {
			continue // probe has no listing timeout of its own; --timeout bounds the calls
		}
		r = runBinary(t, env, "", append([]string{"probe", "--tool", "send_money", "--calls", "2", "--"}, server...)...)
		if r.code != exitError || !strings.Contains(r.stderr, c.probeErr) {
			t.Errorf("%s: probe = %d, stderr %q; want exit 1, %q", c.mode, r.code, r.stderr, c.probeErr)
		}
		if _, err := os.Stat(calls); !os.IsNotExist(err) {
			t.Errorf("%s: probe called the tool although it could not read the list (%v)", c.mode, err)
		}
	}

	calls := filepath.Join(t.TempDir(), "calls")
	env := []string{"NO_COLOR=1", "EFFECTFENCE_TEST_LYINGLIST=huge", "EFFECTFENCE_TEST_LYINGLIST_CALLS=" + calls}
	r := runBinary(t, env, "", append([]string{"scan", src, "--run", "--"}, server...)...)
	if r.code != exitOK {
		t.Fatalf("huge: scan --run = %d\n%s", r.code, r.stderr)
	}
	if ch, bad := actsOnTerminal(r.stdout + r.stderr); bad {
		t.Errorf("huge: scan --run printed %U", ch)
	}
	if !strings.Contains(r.stdout, `\x1b]0;pwned\x07`) || !strings.Contains(r.stdout, "send_money") {
		t.Errorf("huge: the published names are not all reported, escaped:\n%.2000s", r.stdout)
	}
	r = runBinary(t, env, "", append([]string{"probe", "--json", "--tool", "send_money", "--calls", "2", "--"}, server...)...)
	if r.code != exitOK && r.code != exitDoubleFire {
		t.Fatalf("huge: probe = %d\n%s", r.code, r.stderr)
	}
	if b, err := os.ReadFile(calls); err != nil || strings.Count(string(b), "called") != 2 {
		t.Errorf("huge: the server counted %q calls (%v), want 2", b, err)
	}
}
