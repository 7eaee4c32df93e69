package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeUseItCommandsExist reads the README's "Use it" table: every `effectfence …`
// command it shows must be a command of the real binary (each of `ledger ls|show|…` too),
// and every --flag it gives that command must be one its --help lists. Every doc the table
// (and the rest of the README) links must exist.
func TestReadmeUseItCommandsExist(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	_, sec, ok := strings.Cut(readme, "\n## Use it\n")
	sec, _, _ = strings.Cut(sec, "\nIn an MCP client config")
	if !ok {
		t.Fatal(`README.md has no "## Use it"`)
	}
	cmds := regexp.MustCompile("`(effectfence(?: [^`]*)?)`").FindAllStringSubmatch(sec, -1)
	if len(cmds) < 10 {
		t.Fatalf("found %d effectfence commands in the README's Use it table, want at least 10", len(cmds))
	}
	helps := map[string]string{}
	help := func(sub ...string) string {
		key := strings.Join(sub, " ")
		if h, ok := helps[key]; ok {
			return h
		}
		r := runBinary(t, []string{"XDG_STATE_HOME=" + t.TempDir()}, "", append(sub, "--help")...)
		if r.code != exitOK {
			t.Errorf("the README shows `effectfence %s`, but `effectfence %s --help` exits %d: %s", key, key, r.code, r.stderr)
		}
		helps[key] = r.stdout
		return r.stdout
	}
	word := regexp.MustCompile(`^[a-z]+(\\?\|[a-z]+)*$`)
	for _, m := range cmds {
		fields := strings.Fields(m[1])[1:]
		if len(fields) == 0 {
			help() // plain `effectfence`
			continue
		}
		sub := []string{fields[0]}
		h := help(sub...)
		if len(fields) > 1 && word.MatchString(fields[1]) && (fields[0] == "ledger" || fields[0] == "policy") {
			for _, s := range strings.Split(strings.ReplaceAll(fields[1], `\|`, "|"), "|") {
				help(fields[0], s)
			}
			continue
		}
		for _, f := range regexp.MustCompile(`(?:^|[\s\[|])(--[a-z][a-z-]*)`).FindAllStringSubmatch(m[1], -1) {
			if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(f[1]) + `[\s,]`).MatchString(h) {
				t.Errorf("the README gives `effectfence %s` the flag %s, which its --help does not list", fields[0], f[1])
			}
		}
	}
	for _, l := range regexp.MustCompile(`\]\(([^)#]+)(#[^)]*)?\)`).FindAllStringSubmatch(readme, -1) {
		if strings.Contains(l[1], "://") {
			continue
		}
		if _, err := os.Stat(filepath.Join("../..", filepath.FromSlash(l[1]))); err != nil {
			t.Errorf("the README links %s: %v", l[1], err)
		}
	}
}
