package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPeersLocked: the npm peers the tests and the conformance scripts install are pinned by a
// committed lockfile that agrees with package.json, and scripts/install-peers installs exactly
// that tree (npm ci).
func TestPeersLocked(t *testing.T) {
	for _, dir := range []string{"../../scripts/peers", "../../scripts/conformance"} {
		var pkg struct {
			Dependencies map[string]string `json:"dependencies"`
		}
		var lock struct {
			LockfileVersion int `json:"lockfileVersion"`
			Packages        map[string]struct {
				Version      string            `json:"version"`
				Integrity    string            `json:"integrity"`
				Dependencies map[string]string `json:"dependencies"`
			} `json:"packages"`
		}
		readJSON(t, dir+"/package.json", &pkg)
		readJSON(t, dir+"/package-lock.json", &lock)
		if lock.LockfileVersion < 2 || len(pkg.Dependencies) == 0 {
			t.Fatalf("%s: lockfile version %d, %d dependencies", dir, lock.LockfileVersion, len(pkg.Dependencies))
		}
		for name, want := range pkg.Dependencies {
			if got := lock.Packages[""].Dependencies[name]; got != want {
				t.Errorf("%s: package.json pins %s %s, the lockfile's root says %q: run npm install --package-lock-only there", dir, name, want, got)
			}
			if p := lock.Packages["node_modules/"+name]; p.Version != want || p.Integrity == "" {
				t.Errorf("%s: the lockfile has %s at %q (integrity %q), want %s", dir, name, p.Version, p.Integrity, want)
			}
		}
	}
	script, err := os.ReadFile("../../scripts/install-peers")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "npm ci") || strings.Contains(string(script), "npm install --no-audit") {
		t.Error("scripts/install-peers must install the locked tree with npm ci")
	}
}

// TestCIHasNoDeadVariables: every EFFECTFENCE_TEST_* variable .ci/run exports is read by Go code.
func TestCIHasNoDeadVariables(t *testing.T) {
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile(`export (EFFECTFENCE_TEST_[A-Z_]+)=`).FindAllStringSubmatch(string(ci), -1)
	if len(vars) == 0 {
		t.Fatal(".ci/run exports no test variables; this test is looking at the wrong file")
	}
	var sources strings.Builder
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".peers" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "peers_locked_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sources.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vars {
		if !strings.Contains(sources.String(), `"`+v[1]+`"`) {
			t.Errorf(".ci/run exports %s but no Go code reads it", v[1])
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
