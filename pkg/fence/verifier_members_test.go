package fence_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/internal/doctest"
	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
)

// TestDocumentedVerifierJudgesMembersAsCert: docs/CERTS.md's Python verifier judges a cert
// edited by hand, and hashed again by the editor, as fence.Cert does, member by member. It
// hashed whatever members a cert had, so a cert given a member that is not a cert's (at its
// top or in a read set entry), or a string member of another type (an intent 5, a tool {}),
// hashed again, printed ok where fence.Cert refuses it; and a member left out or null, which
// fence.Cert reads as its zero value ("", 0, {}, []), was hashed as absent or null, so the
// verifier printed ok for the cert hashed without it, which fence.Cert refuses, and MISMATCH
// for the cert hashed with the zero value, which fence.Cert verifies. Both now read a member
// left out or null as its zero value and refuse the rest.
func TestDocumentedVerifierJudgesMembersAsCert(t *testing.T) {
	t.Parallel()
	verify := doctest.CertsVerifierRun(t, "../../docs/CERTS.md")
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "members", Tool: "t", Args: json.RawMessage(`{"n":1}`), Agent: "a", Domain: "d",
		ReadSet: []fence.ReadSetEntry{{Domain: "d", Seq: 0}}, Clock: fence.VectorClock{"b": 3}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`{"ok":true}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(cert)
	if err != nil {
		t.Fatal(err)
	}
	decode := func() map[string]any {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var m map[string]any
		if err := d.Decode(&m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	entry := func(m map[string]any) map[string]any { return m["read_set"].([]any)[0].(map[string]any) }
	for _, c := range []struct {
		name string
		// shown edits the cert as it is written, hashed the body its editor hashes again
		// (the cert's members but hash, and result and result_bytes beside result_sha256).
		shown, hashed func(m map[string]any)
		want          string
	}{
		{name: "a member that is not a cert's", want: "MISMATCH",
			shown: func(m map[string]any) { m["note"] = "refund sent" }, hashed: func(m map[string]any) { m["note"] = "refund sent" }},
		{name: "a read set entry's member that is not domain or seq", want: "MISMATCH",
			shown: func(m map[string]any) { entry(m)["sequence"] = 7 }, hashed: func(m map[string]any) { entry(m)["sequence"] = 7 }},
		{name: "an intent that is a number", want: "MISMATCH",
			shown: func(m map[string]any) { m["intent"] = 5 }, hashed: func(m map[string]any) { m["intent"] = 5 }},
		{name: "a tool that is an object", want: "MISMATCH",
			shown: func(m map[string]any) { m["tool"] = map[string]any{} }, hashed: func(m map[string]any) { m["tool"] = map[string]any{} }},
		{name: "a read set domain that is a number", want: "MISMATCH",
			shown: func(m map[string]any) { entry(m)["domain"] = 1 }, hashed: func(m map[string]any) { entry(m)["domain"] = 1 }},
		{name: "parent left out, hashed without it", want: "MISMATCH",
			shown: func(m map[string]any) { delete(m, "parent") }, hashed: func(m map[string]any) { delete(m, "parent") }},
		{name: "parent left out, hashed as empty", want: "ok",
			shown: func(m map[string]any) { delete(m, "parent") }, hashed: func(map[string]any) {}},
		{name: "agent null, hashed as empty", want: "ok",
			shown: func(m map[string]any) { m["agent"] = nil }, hashed: func(m map[string]any) { m["agent"] = "" }},
		{name: "agent null, hashed as null", want: "MISMATCH",
			shown: func(m map[string]any) { m["agent"] = nil }, hashed: func(m map[string]any) { m["agent"] = nil }},
		{name: "seq and read set null, hashed as 0 and []", want: "ok",
			shown:  func(m map[string]any) { m["seq"], m["read_set"] = nil, nil },
			hashed: func(m map[string]any) { m["seq"], m["read_set"] = 0, []any{} }},
		{name: "vector clock left out, hashed as {}", want: "ok",
			shown: func(m map[string]any) { delete(m, "vector_clock") }, hashed: func(m map[string]any) { m["vector_clock"] = map[string]any{} }},
		{name: "a read set entry's seq left out, hashed as 0", want: "ok",
			shown: func(m map[string]any) { delete(entry(m), "seq") }, hashed: func(map[string]any) {}},
		{name: "result_sha256 empty: an older cert, hashed over result_bytes' value", want: "ok",
			shown: func(m map[string]any) { m["result_sha256"] = "" },
			hashed: func(m map[string]any) {
				delete(m, "result_sha256")
				m["result"] = map[string]any{"ok": true}
			}},
		{name: "result_bytes with a line break inside its base64", want: "ok",
			shown:  func(m map[string]any) { s := m["result_bytes"].(string); m["result_bytes"] = s[:4] + "\n" + s[4:] },
			hashed: func(map[string]any) {}},
	} {
		t.Run(c.name, func(t *testing.T) {
			shown, hashed := decode(), decode()
			delete(hashed, "hash")
			delete(hashed, "result")
			delete(hashed, "result_bytes")
			c.shown(shown)
			c.hashed(hashed)
			body, err := json.Marshal(hashed)
			if err != nil {
				t.Fatal(err)
			}
			canonical, err := canon.JSON(body)
			if err != nil {
				t.Fatal(err)
			}
			shown["hash"] = canon.Sum(canonical)
			edited, err := json.Marshal(shown)
			if err != nil {
				t.Fatal(err)
			}
			var back fence.Cert
			goes := "ok"
			if json.Unmarshal(edited, &back) != nil || back.Verify() != nil {
				goes = "MISMATCH"
			}
			if goes != c.want {
				t.Fatalf("fence.Cert: %s, want %s, of\n%s", goes, c.want, edited)
			}
			if got, err := verify(edited); err != nil || got != c.want {
				t.Errorf("the documented verifier: %s (%v), want %s as fence.Cert, of\n%s", got, err, c.want, edited)
			}
		})
	}

	// An older cert (no result_sha256: its hash covers result) whose result holds a member
	// twice, hashed over the last: such a result has no canonical form, and fence.Cert refuses
	// it; the verifier hashed the last of the two.
	old := &fence.Cert{Intent: "older", Tool: "t", Args: json.RawMessage(`{"n":1}`), Agent: "a", Clock: fence.VectorClock{"a": 1},
		ReadSet: []fence.ReadSetEntry{}, Result: json.RawMessage(`{"k":{"a":2}}`)}
	if old.Hash, err = old.ComputeHash(); err != nil {
		t.Fatal(err)
	}
	if raw, err = json.Marshal(old); err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]string{
		string(raw): "ok",
		strings.Replace(string(raw), `"result":{"k":{"a":2}}`, `"result":{"k":{"a":1,"a":2}}`, 1): "MISMATCH",
	} {
		if !strings.Contains(text, `"result":{"k":{"a":`) {
			t.Fatalf("no result to edit in %s", text)
		}
		var back fence.Cert
		goes := "ok"
		if json.Unmarshal([]byte(text), &back) != nil || back.Verify() != nil {
			goes = "MISMATCH"
		}
		if got, err := verify([]byte(text)); goes != want || err != nil || got != want {
			t.Errorf("fence.Cert %s, the documented verifier %s (%v), want %s, of\n%s", goes, got, err, want, text)
		}
	}
}
