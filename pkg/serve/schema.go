package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/internal/jsonrpc"
	"github.com/google/jsonschema-go/jsonschema"
	validator "github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// english renders validation messages ("got string, want object").
var english = message.NewPrinter(language.English)

// typeSchemas gives the JSON schema of the types whose Go kind says nothing about their JSON
// (raw JSON values, the vector clock, timestamps), so every published property has a type.
var typeSchemas = map[reflect.Type]*jsonschema.Schema{
	reflect.TypeFor[JSONValue](): {
		Types:       []string{"object", "array", "string", "number", "boolean", "null"},
		Description: "any JSON value",
	},
	reflect.TypeFor[ArgsValue](): {Types: []string{"object", "null"}},
	reflect.TypeFor[fence.VectorClock](): {
		Type:                 "object",
		AdditionalProperties: &jsonschema.Schema{Type: "integer", Minimum: ptr(0.0)},
	},
	reflect.TypeFor[time.Time](): {Type: "string", Format: "date-time"},
}

func ptr[T any](v T) *T { return &v }

// inputSchema generates the published JSON schema of In and compiles the validator every call
// is checked against, so what the server says and what it accepts cannot drift apart.
func inputSchema[In any](name string, adjust func(*jsonschema.Schema)) (json.RawMessage, *validator.Schema, error) {
	s, err := jsonschema.For[In](&jsonschema.ForOptions{TypeSchemas: typeSchemas})
	if err != nil {
		return nil, nil, fmt.Errorf("input schema of %s: %w", name, err)
	}
	if adjust != nil {
		adjust(s)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return nil, nil, fmt.Errorf("input schema of %s: %w", name, err)
	}
	doc, err := validator.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("input schema of %s: %w", name, err)
	}
	url := "mem:///effectfence/" + name + ".json"
	c := validator.NewCompiler()
	if err := c.AddResource(url, doc); err != nil {
		return nil, nil, fmt.Errorf("input schema of %s: %w", name, err)
	}
	compiled, err := c.Compile(url)
	if err != nil {
		return nil, nil, fmt.Errorf("input schema of %s: %w", name, err)
	}
	return raw, compiled, nil
}

// checkArgs validates the raw arguments of a call against the compiled schema and returns a
// message that names each offending field.
func checkArgs(compiled *validator.Schema, raw []byte) error {
	inst, err := validator.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fence.InvalidError{Field: "arguments", Why: "not valid JSON: " + err.Error()}
	}
	err = compiled.Validate(inst)
	if err == nil {
		return nil
	}
	verr, ok := err.(*validator.ValidationError)
	if !ok {
		return fence.InvalidError{Field: "arguments", Why: err.Error()}
	}
	var leaves []leaf
	collect(verr, &leaves)
	if len(leaves) == 1 {
		return fence.InvalidError{Field: leaves[0].at, Why: leaves[0].why + " (see the tool's input schema)"}
	}
	msgs := make([]string, len(leaves))
	for i, l := range leaves {
		msgs[i] = l.at + ": " + l.why
	}
	return fence.InvalidError{Field: "arguments", Why: "do not match the tool's input schema: " + strings.Join(msgs, "; ")}
}

// checkText refuses arguments a JSON decoder would change or read two ways, naming the
// member: invalid UTF-8 and lone surrogate escapes (decoded, both become U+FFFD, so
// "pay:\ud800" and "pay:\xff" were one intent and the second got the first one's receipt)
// and a member given twice (decoders keep the last). raw is a JSON object checkArgs
// accepted. result is exempt: a tool's result is recorded as it came, whatever it holds.
func checkText(raw []byte) error {
	seen := map[string]bool{}
	for m := range jsonrpc.Members(raw) {
		if _, err := canon.JSON(raw[m.Key:m.KeyEnd]); err != nil {
			return fence.InvalidError{Field: "arguments", Why: "a member name " + strings.TrimPrefix(err.Error(), "canon: ")}
		}
		key := jsonrpc.Unquote(raw[m.Key:m.KeyEnd])
		if seen[key] {
			return fence.InvalidError{Field: key, Why: "is given twice"}
		}
		seen[key] = true
		if key != "result" {
			if _, err := canon.JSON(raw[m.Start:m.End]); err != nil {
				return fence.InvalidError{Field: key, Why: strings.TrimPrefix(err.Error(), "canon: ") + " (text must be valid UTF-8 without lone surrogates, each member given once)"}
			}
		}
	}
	return nil
}

// leaf is one violation: where in the arguments, and what is wrong.
type leaf struct{ at, why string }

func collect(e *validator.ValidationError, out *[]leaf) {
	if len(e.Causes) == 0 {
		at := pointer(e.InstanceLocation)
		if at == "" {
			at = "arguments"
		}
		*out = append(*out, leaf{at, e.ErrorKind.LocalizedString(english)})
		return
	}
	for _, c := range e.Causes {
		collect(c, out)
	}
}

func pointer(loc []string) string { return strings.Join(loc, ".") }
