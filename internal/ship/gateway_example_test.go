package ship

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestGatewayExample checks examples/gateway against docs/gateway.md and server.json, since
// nothing here runs it (docker compose needs a daemon): every flag it passes is documented, the
// replicas share a scope, only the host's loopback is published, and the image is the release
// server.json names.
func TestGatewayExample(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	compose := read("../../examples/gateway/compose.yaml")
	doc := read("../../docs/gateway.md")
	nginx := read("../../examples/gateway/nginx.conf")
	version := readServerJSON(t).Version

	flags := regexp.MustCompile(`(?m)^\s*- (--[a-z-]+)`).FindAllStringSubmatch(compose, -1)
	if len(flags) < 5 {
		t.Fatalf("found only %d flags in compose.yaml's command", len(flags))
	}
	for _, f := range flags {
		if f[1] != "--" && !strings.Contains(doc, "`"+f[1]+"`") && !strings.Contains(doc, "`"+f[1]+" ") {
			t.Errorf("compose.yaml passes %s, which docs/gateway.md does not document", f[1])
		}
	}
	if !strings.Contains(compose, "- --scope\n") {
		t.Error("the replicas do not share a --scope: a derived scope differs per container (HOSTNAME)")
	}
	if !strings.Contains(compose, "- --listen\n") || !strings.Contains(compose, "EFFECTFENCE_LEDGER: \"postgres://") {
		t.Error("the example is not an HTTP gateway on a PostgreSQL ledger")
	}
	for _, p := range regexp.MustCompile(`(?m)^\s*- "([^"]*:[0-9]+:[0-9]+)"`).FindAllStringSubmatch(compose, -1) {
		if !strings.HasPrefix(p[1], "127.0.0.1:") {
			t.Errorf("compose.yaml publishes %s beyond the host's loopback", p[1])
		}
	}
	for _, file := range []struct{ name, text string }{{"compose.yaml", compose}, {"docs/gateway.md", doc}} {
		tags := regexp.MustCompile(regexp.QuoteMeta(imageRepo)+`:([0-9A-Za-z.-]+)`).FindAllStringSubmatch(file.text, -1)
		if len(tags) == 0 {
			t.Errorf("%s does not use the image %s", file.name, imageRepo)
		}
		for _, m := range tags {
			if m[1] != version {
				t.Errorf("%s uses %s:%s, server.json names %s (scripts/server-json-version sets all)", file.name, imageRepo, m[1], version)
			}
		}
	}
	for _, want := range []string{"proxy_buffering off;", "location = /metrics", "hash $remote_addr consistent;"} {
		if !strings.Contains(nginx, want) {
			t.Errorf("nginx.conf lacks %q", want)
		}
	}
	for i, line := range strings.Split(strings.TrimSpace(read("../../examples/gateway/api-keys.txt")), "\n") {
		if len(strings.Fields(line)) != 2 {
			t.Errorf("api-keys.txt line %d is not `principal token`: %q", i+1, line)
		}
	}
}
