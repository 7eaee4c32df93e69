package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestNoArgumentsServesWhenStdinIsNotATerminal runs `effectfence` with no arguments the way an
// MCP client config does (stdin a pipe) and, on a terminal-like stdin, expects help.
func TestNoArgumentsServesWhenStdinIsNotATerminal(t *testing.T) {
	t.Setenv("EFFECTFENCE_LEDGER", "memory")
	in := strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}` + "\n")
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"effectfence"}, streams{in, &out, &errs}); code != exitOK {
		t.Fatalf("exit %d, stderr: %s", code, errs.String())
	}
	var resp struct {
		Result struct {
			ServerInfo struct {
				Name string `json:"name"`
			} `json:"serverInfo"`
			Instructions string `json:"instructions"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		t.Fatalf("stdout is not one protocol message: %v: %q", err, out.String())
	}
	if resp.Result.ServerInfo.Name != "effectfence" || resp.Result.Instructions == "" {
		t.Fatalf("initialize answer: %s", out.String())
	}
	if !strings.Contains(errs.String(), "ledger memory") {
		t.Fatalf("stderr should say which ledger is served: %q", errs.String())
	}

	tty, err := os.Open(os.DevNull) // a character device, as a terminal is
	if err != nil {
		t.Skip(err)
	}
	defer tty.Close()
	out.Reset()
	if code := run(context.Background(), []string{"effectfence"}, streams{tty, &out, &errs}); code != exitOK {
		t.Fatalf("help exit %d", code)
	}
	if !strings.Contains(out.String(), "USAGE") || !strings.Contains(out.String(), "serve") {
		t.Fatalf("want help listing serve, got %q", out.String())
	}
}

func TestServeUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		says string
	}{
		{"extra argument", []string{"serve", "now"}, nil, "serve takes no arguments"},
		{"negative lease", []string{"serve", "--lease-secs", "-1"}, nil, "--lease-secs=-1"},
		{"zero result ttl", []string{"serve", "--result-ttl-secs", "0"}, nil, "--result-ttl-secs=0"},
		{"too many workers", []string{"serve", "--workers", "500"}, nil, "--workers=500"},
		{"bad env lease", []string{"serve"}, map[string]string{"EFFECTFENCE_LEASE_SECS": "soon"}, "EFFECTFENCE_LEASE_SECS"},
		{"lease not a number", []string{"serve", "--lease-secs", "soon"}, nil, "soon"},
		{"NaN lease", []string{"serve", "--lease-secs", "NaN"}, nil, "--lease-secs=NaN: want a number of seconds from 1"},
		{"infinite lease", []string{"serve", "--lease-secs", "Inf"}, nil, "--lease-secs=+Inf"},
		{"millisecond lease", []string{"serve", "--lease-secs", "0.001"}, nil, "--lease-secs=0.001"},
		{"lease of a year", []string{"serve", "--lease-secs", "31536000"}, nil, "30 days"},
		{"result ttl of ten years", []string{"serve", "--result-ttl-secs", "315360000"}, nil, "366 days"},
		{"NaN env lease", []string{"serve"}, map[string]string{"EFFECTFENCE_LEASE_SECS": "NaN"}, "EFFECTFENCE_LEASE_SECS=NaN"},
		{"infinite env ttl", []string{"serve"}, map[string]string{"EFFECTFENCE_RESULT_TTL_SECS": "inf"}, "EFFECTFENCE_RESULT_TTL_SECS=+Inf"},
		{"tiny env ttl", []string{"serve"}, map[string]string{"EFFECTFENCE_RESULT_TTL_SECS": "0.5"}, "EFFECTFENCE_RESULT_TTL_SECS=0.5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var out, errs bytes.Buffer
			code := run(context.Background(), append([]string{"effectfence"}, c.args...), streams{strings.NewReader(""), &out, &errs})
			if code != exitUsage || !strings.Contains(errs.String(), c.says) || out.Len() != 0 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d mentioning %q and no stdout", code, out.String(), errs.String(), exitUsage, c.says)
			}
		})
	}
}

func TestServeFlagsOverrideEnvironment(t *testing.T) {
	t.Setenv("EFFECTFENCE_LEDGER", "/nonexistent-dir/never.db")
	t.Setenv("EFFECTFENCE_LEASE_SECS", "5")
	var out, errs bytes.Buffer
	code := run(context.Background(), []string{"effectfence", "serve", "--ledger", "memory", "--lease-secs", "7", "--result-ttl-secs", "90"},
		streams{strings.NewReader(""), &out, &errs})
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	if !strings.Contains(errs.String(), "ledger memory (lease 7s, results kept 1m30s)") {
		t.Fatalf("flags did not win over the environment: %q", errs.String())
	}
}

func TestServeIsDurableByDefault(t *testing.T) {
	state := t.TempDir()
	t.Setenv("EFFECTFENCE_LEDGER", "")
	t.Setenv("XDG_STATE_HOME", state)
	var out, errs bytes.Buffer
	if code := run(context.Background(), []string{"effectfence", "serve"}, streams{strings.NewReader(""), &out, &errs}); code != exitOK {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	want := filepath.Join(state, "effectfence", "server.db")
	st, err := os.Stat(want)
	if err != nil {
		t.Fatalf("no default ledger file: %v (stderr %q)", err, errs.String())
	}
	if st.Mode().Perm() != 0o600 || !strings.Contains(errs.String(), "ledger "+want) {
		t.Fatalf("ledger %s mode %v, stderr %q", want, st.Mode(), errs.String())
	}
	// docs/privacy.md: "created 0600 in a 0700 directory, so only your user can read it".
	if runtime.GOOS != "windows" {
		dir, err := os.Stat(filepath.Dir(want))
		if err != nil {
			t.Fatal(err)
		}
		if dir.Mode().Perm() != 0o700 {
			t.Fatalf("the ledger's directory %s has mode %v; want 0700", filepath.Dir(want), dir.Mode().Perm())
		}
	}
}
