package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runCLI runs the command line in-process with injected streams.
func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), append([]string{"effectfence"}, args...), streams{strings.NewReader(stdin), &out, &errb})
	return code, out.String(), errb.String()
}

func TestRootHelpVersionAndUnknown(t *testing.T) {
	code, out, _ := runCLI(t, "", "--help")
	if code != exitOK || !strings.Contains(out, "make the side effects of AI-agent tool calls happen once") || !strings.Contains(out, "version") {
		t.Fatalf("--help: code %d\n%s", code, out)
	}
	code, out, _ = runCLI(t, "", "version")
	if code != exitOK || !strings.HasPrefix(out, "effectfence ") || !strings.Contains(out, "commit") {
		t.Fatalf("version: code %d %q", code, out)
	}
	code, out, errOut := runCLI(t, "", "version", "extra")
	if code != exitUsage || out != "" || !strings.Contains(errOut, `version takes no arguments, got "extra"`) {
		t.Fatalf("version extra: code %d stdout %q stderr %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "", "frobnicate")
	if code != exitUsage || !strings.Contains(errOut, `unknown command "frobnicate"`) || !strings.Contains(errOut, "--help") {
		t.Fatalf("unknown command: code %d %q", code, errOut)
	}
	code, out, errOut = runCLI(t, "", "help", "nosuch")
	if code != exitUsage || out != "" || !strings.Contains(errOut, "help: no command 'nosuch'") {
		t.Fatalf("help nosuch: code %d stdout %q stderr %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, "", "--no-such-flag")
	if code != exitUsage || errOut == "" {
		t.Fatalf("unknown flag: code %d %q", code, errOut)
	}
}
