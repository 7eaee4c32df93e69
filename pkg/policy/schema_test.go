package policy

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
)

const schemaPath = "../../docs/policy.schema.json"

func readSchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func propertyNames(t *testing.T, obj any, where string) []string {
	t.Helper()
	m, ok := obj.(map[string]any)
	if !ok {
		t.Fatalf("%s: not an object", where)
	}
	props, ok := m["properties"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no properties", where)
	}
	var out []string
	for k := range props {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func sorted(xs []string) []string {
	out := slices.Clone(xs)
	slices.Sort(out)
	return out
}

// TestSchemaKeysMatchParser: every key the parser accepts is in the schema and vice versa, at
// every level, so the two cannot drift.
func TestSchemaKeysMatchParser(t *testing.T) {
	s := readSchema(t)
	defs := s["$defs"].(map[string]any)
	top := s["properties"].(map[string]any)
	for _, c := range []struct {
		where  string
		schema []string
		parser []string
	}{
		{"top level", propertyNames(t, s, "top"), serverKeys},
		{"$defs/tool", propertyNames(t, defs["tool"], "tool"), toolKeys},
		{"$defs/defaults", propertyNames(t, defs["defaults"], "defaults"), defaultsKeys},
		{"on_unknown", propertyNames(t, top["on_unknown"], "on_unknown"), hookKeys},
	} {
		if !slices.Equal(c.schema, sorted(c.parser)) {
			t.Errorf("%s: schema has %v, parser accepts %v", c.where, c.schema, sorted(c.parser))
		}
	}
}

// TestDocsNameEveryKey: docs/policy.md describes each key the parser accepts.
func TestDocsNameEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../docs/policy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, keys := range [][]string{serverKeys, toolKeys, hookKeys} {
		for _, k := range keys {
			if !bytes.Contains(b, []byte("`"+k+"`")) {
				t.Errorf("docs/policy.md does not describe `%s`", k)
			}
		}
	}
}

func compileSchema(t *testing.T) *validator.Schema {
	t.Helper()
	c := validator.NewCompiler()
	s, err := c.Compile(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func validate(t *testing.T, s *validator.Schema, src []byte) error {
	t.Helper()
	j, err := yaml.YAMLToJSON(src)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := validator.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate(inst)
}

// TestExamplesPassCheckAndSchema: the example files are accepted by the parser and valid
// under the schema an editor uses.
func TestExamplesPassCheckAndSchema(t *testing.T) {
	s := compileSchema(t)
	files, err := filepath.Glob("../../examples/policy/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("examples: %v %v", files, err)
	}
	srcs := map[string][]byte{"good": []byte(good), "precedence": []byte(precedence)}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		srcs[f] = b
	}
	for name, src := range srcs {
		if _, err := Parse(name, src); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if err := validate(t, s, src); err != nil {
			t.Errorf("%s: schema: %v", name, err)
		}
	}
}

// TestSchemaRefusesWhatTheParserRefuses: files the parser refuses for their shape are also
// invalid under the schema (an editor flags them before check does).
func TestSchemaRefusesWhatTheParserRefuses(t *testing.T) {
	s := compileSchema(t)
	for _, src := range []string{
		"scope: x\n",
		"version: 2\n",
		"version: 1\nfence_read: true\n",
		"version: 1\ntools:\n  c:\n    keys: [a]\n",
		"version: 1\ndefaults:\n  key: [a]\n",
		"version: 1\ntools:\n  c:\n    fence: \"yes\"\n",
		"version: 1\ntools:\n  c:\n    replay_window: 10 minutes\n",
		"version: 1\ntools:\n  c:\n    wait: 30\n",
		"version: 1\ntools:\n  c:\n    key: [a..b]\n",
		"version: 1\ntools:\n  c:\n    key: [\"*.id\"]\n",
		"version: 1\ntools:\n  c:\n    ignore: [items.*.ts]\n",
		"version: 1\ndefaults:\n  ignore: [\"*\"]\n",
		"version: 1\ntools:\n  c:\n    key: []\n",
		"version: 1\ntools:\n  c:\n    result: full\n",
		"version: 1\ntools:\n  \"c[ab]\":\n    wait: 1s\n",
		"version: 1\ntools:\n  c:\n    fence: false\n    key: [a]\n",
		"version: 1\non_unknown:\n  command: [x]\n  url: https://h/p\n",
		"version: 1\non_unknown:\n  url: http://pager.example.com/x\n",
		"version: 1\non_unknown:\n  command: [x]\n  retries: 11\n",
	} {
		if _, err := Parse("x.yaml", []byte(src)); err == nil {
			t.Errorf("the parser accepts %q", src)
		}
		if err := validate(t, s, []byte(src)); err == nil {
			t.Errorf("the schema accepts %q", strings.TrimSpace(src))
		}
	}
}

// TestSchemaKeysAreTheParsersKeys holds the schema to what Parse does, not to the lists in
// parse.go: at each level, every name any level knows (and a few near misses) is given with a
// value no key takes ([[]]); the parser must call it an unknown key exactly when the schema
// has no such property there (defaults refuses fence and key with their own message).
func TestSchemaKeysAreTheParsersKeys(t *testing.T) {
	s := readSchema(t)
	defs := s["$defs"].(map[string]any)
	top := s["properties"].(map[string]any)
	levels := []struct {
		name   string
		schema []string
		wrap   func(k string) string
	}{
		{"top level", propertyNames(t, s, "top"), func(k string) string { return "version: 1\n" + k + ": [[]]\n" }},
		{"tool", propertyNames(t, defs["tool"], "tool"), func(k string) string { return "version: 1\ntools:\n  c:\n    " + k + ": [[]]\n" }},
		{"defaults", propertyNames(t, defs["defaults"], "defaults"), func(k string) string { return "version: 1\ndefaults:\n  " + k + ": [[]]\n" }},
		{"on_unknown", propertyNames(t, top["on_unknown"], "on_unknown"), func(k string) string { return "version: 1\non_unknown:\n  " + k + ": [[]]\n" }},
	}
	names := map[string]bool{"Version": true, "fence_read": true, "keys": true, "replay-window": true, "cmd": true, "retry": true, "": false}
	for _, l := range levels {
		for _, k := range l.schema {
			names[k] = true
		}
	}
	for _, l := range levels {
		for k := range names {
			if k == "" || (l.name == "defaults" && (k == "fence" || k == "key")) {
				continue
			}
			_, err := Parse("p.yaml", []byte(l.wrap(k)))
			if err == nil {
				t.Errorf("%s: %q with [[]] accepted", l.name, k)
				continue
			}
			unknown := strings.Contains(err.Error(), "unknown key "+strconv.Quote(k))
			if inSchema := slices.Contains(l.schema, k); unknown == inSchema {
				t.Errorf("%s: %q: in the schema %v, but the parser says: %v", l.name, k, inSchema, err)
			}
		}
	}
}

// TestSchemaAcceptsWhatTheParserAccepts: files the parser accepts are valid under the schema,
// so an editor does not flag a file `policy check` takes. redact beside fence: false (the one
// setting a tool that passes through may have, docs/policy.md) was refused by the schema
// ("maxProperties: got 2, want 1") while the parser accepted it.
func TestSchemaAcceptsWhatTheParserAccepts(t *testing.T) {
	s := compileSchema(t)
	for _, src := range []string{
		"version: 1\ntools:\n  c:\n    fence: false\n    redact: [card.number]\n",
		"version: 1\ntools:\n  c:\n    redact: [card.number]\n    fence: false\n  \"list_*\":\n    fence: false\n",
		"version: 1\ntools:\n  c:\n    fence: true\n    redact: [card.number]\n    key: [order]\n",
	} {
		if _, err := Parse("x.yaml", []byte(src)); err != nil {
			t.Errorf("the parser refuses %q: %v", src, err)
		}
		if err := validate(t, s, []byte(src)); err != nil {
			t.Errorf("the schema refuses %q: %v", strings.TrimSpace(src), err)
		}
	}
	// Any other setting beside fence: false is still refused by both.
	src := "version: 1\ntools:\n  c:\n    fence: false\n    redact: [card.number]\n    result: hash\n"
	if _, err := Parse("x.yaml", []byte(src)); err == nil {
		t.Errorf("the parser accepts %q", src)
	}
	if err := validate(t, s, []byte(src)); err == nil {
		t.Errorf("the schema accepts %q", src)
	}
}
