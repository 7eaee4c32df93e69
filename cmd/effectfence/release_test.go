package main

import (
	"os"
	"strings"
	"testing"
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
