package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeWrapConfigsRun takes the MCP client configs the README and docs/probe-and-demo.md
// show (every ```json block whose server command is effectfence, and the README's policy form:
// its YAML file, given by --policy and by EFFECTFENCE_POLICY), keeps wrap's part of each and puts the real binary's demo server
// behind it: each must start, and 4 identical charges through it must run once. The flag form
// once failed at start ("--replay-window create_charge=7d": the flag took no days), and then
// warned that its 7d window held for the 24 h result TTL only, which the config did not raise.
func TestReadmeWrapConfigsRun(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	recipes, err := os.ReadFile("../../docs/probe-and-demo.md")
	if err != nil {
		t.Fatal(err)
	}
	type form struct {
		name string
		wrap []string // wrap and its flags, before "--"
		env  []string
		// quiet: a config the reader copies whole must not start with a warning (a replay
		// window past the result TTL, which the config does not raise, holds for the TTL only)
		quiet bool
	}
	var forms []form
	for _, doc := range []struct {
		name string
		text []byte
	}{{"README", readme}, {"probe-and-demo", recipes}} {
		for i, m := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllSubmatch(doc.text, -1) {
			var cfg struct {
				MCPServers map[string]struct {
					Command string            `json:"command"`
					Args    []string          `json:"args"`
					Env     map[string]string `json:"env"`
				} `json:"mcpServers"`
			}
			if err := json.Unmarshal(m[1], &cfg); err != nil {
				t.Fatalf("%s json block %d does not parse: %v\n%s", doc.name, i+1, err, m[1])
			}
			for name, s := range cfg.MCPServers {
				if filepath.Base(s.Command) != "effectfence" {
					continue
				}
				end := len(s.Args)
				for j, a := range s.Args {
					if a == "--" {
						end = j
						break
					}
				}
				f := form{name: fmt.Sprintf("%s block %d %s", doc.name, i+1, name), wrap: s.Args[:end], quiet: true}
				for k, v := range s.Env {
					if k != "EFFECTFENCE_LEDGER" { // the test's own memory ledger stands for it
						f.env = append(f.env, k+"="+v)
					}
				}
				forms = append(forms, f)
			}
		}
	}
	if len(forms) < 5 {
		t.Fatalf("found %d MCP configs in the README and docs/probe-and-demo.md, want at least 5", len(forms))
	}
	_, rest, ok := strings.Cut(string(readme), "and the policy form")
	yaml := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(rest)
	if !ok || yaml == nil || !strings.Contains(rest[:strings.Index(rest, "```")], `"--policy", "payments.yaml"`) {
		t.Fatal("the README no longer shows the policy form as --policy payments.yaml with its YAML")
	}
	policyFile := filepath.Join(t.TempDir(), "payments.yaml")
	if err := os.WriteFile(policyFile, []byte(yaml[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runBinary(t, nil, "", "policy", "check", policyFile); r.code != 0 {
		t.Fatalf("policy check of the README's policy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	forms = append(forms,
		form{name: "policy flag", wrap: []string{"wrap", "--policy", policyFile}},
		form{name: "EFFECTFENCE_POLICY", wrap: []string{"wrap"}, env: []string{"EFFECTFENCE_POLICY=" + policyFile}})

	bin := effectfence(t)
	for _, f := range forms {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			effects := filepath.Join(t.TempDir(), "effects.log")
			if err := os.WriteFile(effects, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"probe", "--json", "--tool", "charge_card", "--args", `{"amount":4900}`, "--calls", "4",
				"--witness", fmt.Sprintf("%q demo-server --count %q", bin, effects), "--witness-kind", "executions", "--", bin}
			args = append(append(args, f.wrap...), "--", bin, "demo-server", "--effects", effects)
			r := runBinary(t, append([]string{"EFFECTFENCE_LEDGER=memory"}, f.env...), "", args...)
			var rep struct {
				Verdict string `json:"verdict"`
			}
			if r.code != 0 || json.Unmarshal([]byte(r.stdout), &rep) != nil || rep.Verdict != "once_measured" {
				t.Fatalf("wrap %v: exit %d\nstdout:\n%s\nstderr:\n%s", f.wrap, r.code, r.stdout, r.stderr)
			}
			if f.quiet && strings.Contains(r.stderr, "warning") {
				t.Fatalf("wrap %v %v warns at start:\n%s", f.wrap, f.env, r.stderr)
			}
		})
	}
}
