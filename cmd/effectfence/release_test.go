package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// TestLicenseShipped: the repository carries the Apache-2.0 text, every release archive
// lists it, and the README names the licence.
func TestLicenseShipped(t *testing.T) {
	lic, err := os.ReadFile("../../LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(lic), "Apache License") || !strings.Contains(string(lic), "Version 2.0, January 2004") {
		t.Fatal("LICENSE is not the Apache License 2.0 text")
	}
	rel, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files := string(rel)[strings.Index(string(rel), "    files:"):]
	if i := strings.Index(files, "\n\n"); i > 0 {
		files = files[:i]
	}
	if !strings.Contains(files, "- LICENSE\n") {
		t.Fatalf("the release archives do not ship LICENSE:\n%s", files)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "Apache License 2.0") {
		t.Fatal("README does not state the licence")
	}
	if strings.Contains(string(readme), "\ngo install github.com/effectfence/effectfence/cmd/effectfence@latest") {
		t.Fatal("README tells users to go install a module that is not published")
	}
}

// TestReleaseArchiveHoldsDocs: the README says each release archive holds the binary,
// LICENSE, the README and docs/. Every file git tracks under docs/ must match one of the
// archive's `files` globs in .goreleaser.yaml (expanded as goreleaser does, from the
// repository's root). The archive held docs/*.md only: docs/policy.md's link to the policy's
// JSON Schema (docs/policy.schema.json, "a JSON Schema for editors") was broken in it.
func TestReleaseArchiveHoldsDocs(t *testing.T) {
	rel, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Archives []struct {
			Files []string `yaml:"files"`
		} `yaml:"archives"`
	}
	if err := yaml.Unmarshal(rel, &cfg); err != nil {
		t.Fatalf(".goreleaser.yaml: %v", err)
	}
	if len(cfg.Archives) == 0 {
		t.Fatal(".goreleaser.yaml has no archives")
	}
	out, err := exec.Command("git", "-C", "../..", "ls-files", "--", "docs", "LICENSE", "README.md").Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	want := strings.Fields(string(out))
	if len(want) < 3 {
		t.Fatalf("git ls-files names %d files under docs/, LICENSE and README.md", len(want))
	}
	for i, a := range cfg.Archives {
		held := map[string]bool{}
		for _, g := range a.Files {
			m, err := filepath.Glob(filepath.Join("../..", filepath.FromSlash(g)))
			if err != nil {
				t.Fatalf("archive %d: glob %q: %v", i, g, err)
			}
			for _, p := range m {
				rel, _ := filepath.Rel("../..", p)
				held[filepath.ToSlash(rel)] = true
			}
		}
		for _, f := range want {
			if !held[f] {
				t.Errorf("archive %d (files %q) leaves out %s", i, a.Files, f)
			}
		}
	}
}
