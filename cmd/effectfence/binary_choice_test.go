package main

import (
	"debug/buildinfo"
	"testing"
)

// TestRunBinaryChoosesTheBuild: runBinary runs the race build for the long-running commands
// (also when one stands after flags) and the plain one for the one-shot commands and for a
// command that is only named after "--" (another process's argv); the race build carries
// -race and the plain one does not.
func TestRunBinaryChoosesTheBuild(t *testing.T) {
	t.Parallel()
	race, plain := effectfence(t), plainBinary(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"wrap", "--ledger", "memory", "--", "true"}, race},
		{[]string{"--log-format", "json", "serve"}, race},
		{[]string{"probe", "--calls", "2"}, race},
		{[]string{"demo"}, race},
		{[]string{"demo-server", "--latency", "0s"}, race},
		{[]string{"scan", "--run", "."}, race},
		{[]string{"scan", "."}, plain},
		{[]string{"ledger", "ls", "--json"}, plain},
		{[]string{"policy", "init", "-o", "p.yaml", "--", "effectfence", "demo-server"}, race},
		{[]string{"policy", "check", "p.yaml"}, plain},
		{[]string{"ledger", "ls", "--for", "--", "effectfence", "wrap"}, plain},
		{[]string{"version"}, plain},
		{[]string{"--no-such-flag"}, plain},
	} {
		if got := binaryFor(t, c.args); got != c.want {
			t.Errorf("binaryFor %q = %s, want %s", c.args, got, c.want)
		}
	}
	for bin, want := range map[string]bool{race: raceEnabled, plain: false} {
		info, err := buildinfo.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		got := false
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				got = true
			}
		}
		if got != want {
			t.Errorf("%s was built with -race %v, want %v", bin, got, want)
		}
	}
}
