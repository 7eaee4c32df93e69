package ship

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// release is the version being released (GoReleaser's before hook passes it); empty outside a
// release.
var release = flag.String("release", "", "the version being released (X.Y.Z): server.json must name it")

// The server.json schema version this file follows, and what it requires (the registry's
// 2025-12-11 schema: ServerDetail, Package, the transports and the arguments).
const (
	schemaURL = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
	imageRepo = "ghcr.io/effectfence/effectfence"
	// serverName is the registry name; io.github.<owner> is what a GitHub login may publish.
	serverName = "io.github.effectfence/effectfence"
)

var (
	namePattern = regexp.MustCompile(`^[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+$`)
	// semver is the release policy: X.Y.Z with an optional pre-release, no leading v.
	semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)
	urlish = regexp.MustCompile(`^https?://[^\s]+$`)
)

type argument struct {
	Type       string                     `json:"type"`
	Name       string                     `json:"name"`
	Value      *string                    `json:"value"`
	ValueHint  string                     `json:"valueHint"`
	Variables  map[string]json.RawMessage `json:"variables"`
	IsRequired bool                       `json:"isRequired"`
}

type serverJSON struct {
	Schema      string `json:"$schema"`
	Name        string `json:"name"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Version     string `json:"version"`
	WebsiteURL  string `json:"websiteUrl"`
	Repository  *struct {
		URL    string `json:"url"`
		Source string `json:"source"`
	} `json:"repository"`
	Packages []struct {
		RegistryType string `json:"registryType"`
		Identifier   string `json:"identifier"`
		Version      string `json:"version"`
		RuntimeHint  string `json:"runtimeHint"`
		Transport    *struct {
			Type string `json:"type"`
			URL  string `json:"url"`
		} `json:"transport"`
		RuntimeArguments     []argument `json:"runtimeArguments"`
		PackageArguments     []argument `json:"packageArguments"`
		EnvironmentVariables []struct {
			Name string `json:"name"`
		} `json:"environmentVariables"`
	} `json:"packages"`
}

func readServerJSON(t *testing.T) serverJSON {
	t.Helper()
	raw, err := os.ReadFile("../../server.json")
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(raw) {
		t.Fatal("server.json is not valid JSON")
	}
	var s serverJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("server.json: %v", err)
	}
	return s
}

// TestServerJSONFollowsItsSchema checks the fields the schema version it names requires and
// the constraints the registry enforces on them.
func TestServerJSONFollowsItsSchema(t *testing.T) {
	s := readServerJSON(t)
	if s.Schema != schemaURL {
		t.Fatalf("server.json names schema %q; this test knows %q: check the new version's changes, then update both", s.Schema, schemaURL)
	}
	if s.Name != serverName || !namePattern.MatchString(s.Name) || len(s.Name) > 200 {
		t.Errorf("name %q: want %q (reverse-DNS, one slash)", s.Name, serverName)
	}
	if n := len([]rune(s.Description)); n == 0 || n > 100 {
		t.Errorf("description has %d characters; the schema takes 1 to 100", n)
	}
	if !strings.Contains(s.Description, "Go effectfence") || !strings.Contains(s.Description, "once") {
		t.Errorf("description %q does not say this is the Go effectfence and what it does", s.Description)
	}
	if n := len([]rune(s.Title)); n > 100 {
		t.Errorf("title has %d characters; the schema takes at most 100", n)
	}
	if s.Version == "" || len(s.Version) > 255 || strings.ContainsAny(s.Version, "^~<>=*x ") || s.Version == "latest" {
		t.Errorf("version %q is missing, a range or latest", s.Version)
	}
	if s.Repository == nil || s.Repository.URL != "https://github.com/effectfence/effectfence" || s.Repository.Source != "github" {
		t.Errorf("repository must be the GitHub repository with source github: %+v", s.Repository)
	}
	if len(s.Packages) == 0 {
		t.Fatal("no packages")
	}
	for i, p := range s.Packages {
		where := fmt.Sprintf("packages[%d]", i)
		if p.RegistryType == "" || p.Identifier == "" || p.Transport == nil {
			t.Errorf("%s: registryType, identifier and transport are required", where)
			continue
		}
		switch p.Transport.Type {
		case "stdio":
			if p.Transport.URL != "" {
				t.Errorf("%s: a stdio transport has no url", where)
			}
		case "streamable-http", "sse":
			if !urlish.MatchString(p.Transport.URL) {
				t.Errorf("%s: transport %s needs an http(s) url, got %q", where, p.Transport.Type, p.Transport.URL)
			}
		default:
			t.Errorf("%s: unknown transport type %q", where, p.Transport.Type)
		}
		if p.Version == "latest" {
			t.Errorf("%s: version latest is refused", where)
		}
		if (len(p.RuntimeArguments) > 0) != (p.RuntimeHint != "") {
			t.Errorf("%s: runtimeHint belongs with runtimeArguments", where)
		}
		for j, a := range append(append([]argument{}, p.RuntimeArguments...), p.PackageArguments...) {
			checkArgument(t, fmt.Sprintf("%s argument %d", where, j), a)
		}
		switch p.RegistryType {
		case "oci":
			repo, tag, ok := strings.Cut(p.Identifier, ":")
			if !ok || repo != imageRepo || tag == "" {
				t.Errorf("%s: the image must be %s with a tag, got %q", where, imageRepo, p.Identifier)
			}
			if tag != s.Version {
				t.Errorf("%s: image tag %q is not the server's version %q (docs/RELEASING.md: both name the release)", where, tag, s.Version)
			}
			if p.RuntimeHint != "docker" {
				t.Errorf("%s: runtimeHint %q, want docker", where, p.RuntimeHint)
			}
		case "npm", "pypi", "nuget", "mcpb":
			t.Errorf("%s: effectfence ships no %s package", where, p.RegistryType)
		default:
			t.Errorf("%s: unknown registryType %q", where, p.RegistryType)
		}
	}
}

func checkArgument(t *testing.T, where string, a argument) {
	t.Helper()
	switch a.Type {
	case "positional":
		if a.Value == nil && a.ValueHint == "" {
			t.Errorf("%s: a positional argument needs value or valueHint", where)
		}
	case "named":
		if a.Name == "" {
			t.Errorf("%s: a named argument needs a name", where)
		}
	default:
		t.Errorf("%s: type %q is neither positional nor named", where, a.Type)
	}
	if a.Value == nil {
		return
	}
	// Every {variable} in a value is declared, and every declared one is used.
	for _, m := range regexp.MustCompile(`\{([a-z_]+)\}`).FindAllStringSubmatch(*a.Value, -1) {
		if _, ok := a.Variables[m[1]]; !ok {
			t.Errorf("%s: {%s} is not declared in variables", where, m[1])
		}
	}
	for v := range a.Variables {
		if !strings.Contains(*a.Value, "{"+v+"}") {
			t.Errorf("%s: variable %s is declared but not used", where, v)
		}
	}
}

// TestServerJSONNamesTheRelease is the release policy of docs/RELEASING.md: server.json's
// version is a plain X.Y.Z[-pre] (the tag without its v), and during a release it is the
// version being released.
func TestServerJSONNamesTheRelease(t *testing.T) {
	s := readServerJSON(t)
	if !semver.MatchString(s.Version) {
		t.Fatalf("version %q is not X.Y.Z[-pre] without a leading v", s.Version)
	}
	if *release != "" && s.Version != *release {
		t.Fatalf("server.json names version %s but %s is being released: run scripts/server-json-version %s and commit before tagging (docs/RELEASING.md)", s.Version, *release, *release)
	}
	doc, err := os.ReadFile("../../docs/RELEASING.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scripts/server-json-version", "server.json", imageRepo, "mcp-publisher publish"} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/RELEASING.md does not mention %q", want)
		}
	}
}

// TestServerJSONMatchesTheImage: the registry lists the image only if the image's label names
// the server, and the release must build the image server.json points at.
func TestServerJSONMatchesTheImage(t *testing.T) {
	s := readServerJSON(t)
	docker, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(docker), `io.modelcontextprotocol.server.name="`+s.Name+`"`) {
		t.Errorf("the Dockerfile does not label the image io.modelcontextprotocol.server.name=%q", s.Name)
	}
	for _, want := range []string{"USER 65532:65532", "CGO_ENABLED=0", "-trimpath", "AS release", `ENTRYPOINT ["/usr/local/bin/effectfence"]`} {
		if !strings.Contains(string(docker), want) {
			t.Errorf("the Dockerfile lacks %q", want)
		}
	}
	rel, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dockers_v2:", "- " + imageRepo + "\n", `- "{{ .Version }}"`, "io.modelcontextprotocol.server.name: " + s.Name, "--target=release", "-release={{ if not .IsSnapshot }}{{ .Version }}{{ end }}"} {
		if !strings.Contains(string(rel), want) {
			t.Errorf(".goreleaser.yaml lacks %q", want)
		}
	}
}
