package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/ledger"
	"github.com/effectfence/effectfence/pkg/store"
)

// TestEmptyLedgerFlagActsOnNoLedger: `--ledger ""` is what a script's unset variable gives
// (`effectfence ledger clear "$I" --ledger "$LEDGER"`). It names no ledger, so the command is
// a usage error and opens nothing. Before, it was read as no --ledger at all: the command
// acted on the ledger of EFFECTFENCE_LEDGER (or the default one), and a clear or a resolve
// freed an intent of that ledger, whose next attempt then ran the effect.
func TestEmptyLedgerFlagActsOnNoLedger(t *testing.T) {
	t.Parallel()
	other := filepath.Join(t.TempDir(), "other.db")
	fenceIntents(t, other, "charge:order-7")
	env := []string{store.EnvLedger + "=" + other, "XDG_STATE_HOME=" + t.TempDir(), "NO_COLOR=1"}
	for _, args := range [][]string{
		{"clear", "charge:order-7", "--reason", "no charge at the PSP"},
		{"clear", "charge:order-7", "--reason", "no charge at the PSP", "--force"},
		{"resolve", "charge:order-7", "--did-not-happen", "--reason", "no charge at the PSP"},
		{"resolve", "charge:order-7", "--happened", "--reason", "charge at the PSP"},
		{"ls"},
		{"show", "charge:order-7"},
		{"sweep"},
		{"check"},
	} {
		for _, empty := range []string{"", " "} {
			argv := append(append([]string{"ledger"}, args...), "--ledger", empty)
			r := runBinary(t, env, "", argv...)
			if r.code != exitUsage || !strings.Contains(r.stderr, "--ledger is empty") || r.stdout != "" {
				t.Errorf("%q: exit %d; want %d, --ledger is empty\nstdout %s\nstderr %s", argv, r.code, exitUsage, r.stdout, r.stderr)
			}
		}
	}
	r := runBinary(t, []string{store.EnvLedger + "="}, "", "ledger", "show", "charge:order-7", "--json", "--ledger", other)
	var d ledger.Detail
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("ledger show --json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	if d.Record.State != fence.StateUnknown {
		t.Errorf("after the commands with an empty --ledger, EFFECTFENCE_LEDGER's intent is %s; want it still unknown\n%s", d.Record.State, r.stdout)
	}
}

// TestEmptyLedgerFlagStartsNoFence: `wrap --ledger ""` (an MCP config's unset variable) and
// `serve --ledger ""` are usage errors too: nothing starts, no server, no ledger. Before, wrap
// fenced its calls in the default per-command ledger and serve in EFFECTFENCE_LEDGER's, not
// the one the fleet shares, so a call its peers had recorded ran again.
func TestEmptyLedgerFlagStartsNoFence(t *testing.T) {
	t.Parallel()
	state, dir := t.TempDir(), t.TempDir()
	marker := filepath.Join(dir, "server-started")
	env := []string{store.EnvLedger + "=" + filepath.Join(dir, "fleet.db"), "XDG_STATE_HOME=" + state, "NO_COLOR=1"}
	for _, argv := range [][]string{
		{"wrap", "--ledger", "", "--", "sh", "-c", "touch " + marker},
		{"wrap", "--ledger", "", "--listen", "127.0.0.1:0", "--", "sh", "-c", "touch " + marker},
		{"serve", "--ledger", ""},
	} {
		r := runBinary(t, env, "", argv...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--ledger is empty") || r.stdout != "" {
			t.Errorf("%q: exit %d; want %d, --ledger is empty\nstdout %s\nstderr %s", argv, r.code, exitUsage, r.stdout, r.stderr)
		}
	}
	for _, d := range []string{state, dir} {
		if ents, err := os.ReadDir(d); err != nil || len(ents) != 0 {
			t.Errorf("%s holds %v (%v) after the refusals; want nothing started, no ledger made", d, ents, err)
		}
	}
}

// TestEmptyScopeOrPolicyFlagStartsNoFence: `wrap --scope ""` and `wrap --policy ""` (an MCP
// config's unset variable) are usage errors, as `--ledger ""` is: nothing starts, no server,
// no ledger. Before, wrap read them as no flag: the scope derived from the command, directory
// and environment, so a ledger its peers of the named scope do not share, and no policy file
// (EFFECTFENCE_POLICY's included), so without the policy's ledger, redact and key settings.
func TestEmptyScopeOrPolicyFlagStartsNoFence(t *testing.T) {
	t.Parallel()
	state, dir := t.TempDir(), t.TempDir()
	fleet := filepath.Join(dir, "fleet.db")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nscope: payments\nledger: "+fleet+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "server-started")
	env := []string{store.EnvLedger + "=", envPolicy + "=" + pol, "XDG_STATE_HOME=" + state, "NO_COLOR=1"}
	for _, flag := range []string{"--scope", "--policy"} {
		for _, argv := range [][]string{
			{"wrap", flag, "", "--", "sh", "-c", "touch " + marker},
			{"wrap", flag, "", "--listen", "127.0.0.1:0", "--", "sh", "-c", "touch " + marker},
		} {
			r := runBinary(t, env, "", argv...)
			if r.code != exitUsage || !strings.Contains(r.stderr, flag+" is empty") || r.stdout != "" {
				t.Errorf("%q: exit %d; want %d, %s is empty\nstdout %s\nstderr %s", argv, r.code, exitUsage, flag, r.stdout, r.stderr)
			}
		}
	}
	for _, d := range []string{state, dir} {
		if ents, err := os.ReadDir(d); err != nil || len(ents) != 0 {
			t.Errorf("%s holds %v (%v) after the refusals; want nothing started, no ledger made", d, ents, err)
		}
	}
	// EFFECTFENCE_POLICY is read as before: set, its policy (and scope); empty, no policy.
	r := runBinary(t, env, "", "wrap", "--ledger", "memory", "--", "true")
	if r.code != 0 || !strings.Contains(r.stderr, `scope "payments"`) {
		t.Errorf("wrap with %s set: exit %d; want 0 and the policy's scope\n%s", envPolicy, r.code, r.stderr)
	}
	r = runBinary(t, append(env, envPolicy+"="), "", "wrap", "--ledger", "memory", "--", "true")
	if r.code != 0 || strings.Contains(r.stderr, "policy") {
		t.Errorf("wrap with %s empty: exit %d; want 0 and no policy\n%s", envPolicy, r.code, r.stderr)
	}
}

// TestEmptyScopeOrPolicyFlagActsOnNoLedger: `ledger … --for --scope "" -- <command>` and
// `--for --policy ""` are usage errors and open nothing. Before, an empty --policy was read
// as none given, so EFFECTFENCE_POLICY's ledger was the one a clear or resolve acted on, and
// an empty --scope as the scope derived from the command, not the one wrap was given.
func TestEmptyScopeOrPolicyFlagActsOnNoLedger(t *testing.T) {
	t.Parallel()
	other := filepath.Join(t.TempDir(), "other.db")
	fenceIntents(t, other, "charge:order-7")
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("version: 1\nledger: "+other+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	env := []string{store.EnvLedger + "=", envPolicy + "=" + pol, "XDG_STATE_HOME=" + state, "NO_COLOR=1"}
	for _, args := range [][]string{
		{"clear", "charge:order-7", "--reason", "no charge at the PSP"},
		{"clear", "charge:order-7", "--reason", "no charge at the PSP", "--force"},
		{"resolve", "charge:order-7", "--did-not-happen", "--reason", "no charge at the PSP"},
		{"resolve", "charge:order-7", "--happened", "--reason", "charge at the PSP"},
		{"ls"},
		{"show", "charge:order-7"},
	} {
		for _, flag := range []string{"--scope", "--policy"} {
			argv := append(append([]string{"ledger"}, args...), "--for", flag, "", "--", "true")
			r := runBinary(t, env, "", argv...)
			if r.code != exitUsage || !strings.Contains(r.stderr, flag+" is empty") || r.stdout != "" {
				t.Errorf("%q: exit %d; want %d, %s is empty\nstdout %s\nstderr %s", argv, r.code, exitUsage, flag, r.stdout, r.stderr)
			}
		}
	}
	r := runBinary(t, []string{store.EnvLedger + "="}, "", "ledger", "show", "charge:order-7", "--json", "--ledger", other)
	var d ledger.Detail
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("ledger show --json: %v\n%s%s", err, r.stdout, r.stderr)
	}
	if d.Record.State != fence.StateUnknown {
		t.Errorf("after the commands with an empty --scope or --policy, the policy ledger's intent is %s; want it still unknown\n%s", d.Record.State, r.stdout)
	}
	if ents, err := os.ReadDir(state); err != nil || len(ents) != 0 {
		t.Errorf("%s holds %v (%v) after the refusals; want no ledger made", state, ents, err)
	}
}
