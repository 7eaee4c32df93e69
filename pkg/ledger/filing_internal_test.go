package ledger

import (
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// The verifier keeps a record's filing as a name and the hash's bytes: what it reads back is
// what the record held, for a cert hash that is one, one that is not (a damaged cert, kept as
// written), a done record without a cert, and a record with neither; and a parent resolves
// by the bytes of its hash.
func TestVerifierKeepsWhatARecordIsFiledUnder(t *testing.T) {
	h := func(c byte) string { return strings.Repeat(string(c), 64) }
	v := newVerifier()
	recs := []*fence.Record{
		{Intent: "a", State: fence.StateDone, Cert: &fence.Cert{Intent: "a", Hash: h('a')}},
		{Intent: "b", State: fence.StateUnknown, Cert: &fence.Cert{Intent: "b", Hash: strings.ToUpper(h('b'))}},
		{Intent: "c", State: fence.StateDone},
		{Intent: "d", State: fence.StateInFlight},
		{Intent: "e", State: fence.StateDone, Cert: &fence.Cert{Intent: "e", Hash: h('e'), Parent: h('a')}},
		{Intent: "f", State: fence.StateDone, Cert: &fence.Cert{Intent: "f", Hash: h('f'), Parent: h('0')}},
		{Intent: "g", State: fence.StateDone, Cert: &fence.Cert{Intent: "g", Hash: h('1'), Parent: strings.ToUpper(h('a'))}},
	}
	for _, r := range recs {
		v.record(r)
	}
	want := map[string]filed{"a": {h('a'), true}, "b": {strings.ToUpper(h('b')), false}, "c": {"", true}, "d": {}, "e": {h('e'), true}, "nobody": {}}
	for intent, w := range want {
		if got := v.filed(intent); got != w {
			t.Errorf("%s is kept as filed %+v, want %+v", intent, got, w)
		}
	}
	if p := v.filed("b").differs(fence.StateUnknown, strings.ToUpper(h('b'))); p != "" {
		t.Errorf("a damaged cert's hash filed as written: %s", p)
	}
	if p := v.filed("b").differs(fence.StateUnknown, h('b')); !strings.Contains(p, "filed under cert hash "+h('b')) {
		t.Errorf("a damaged cert's hash filed lowercased: %q, want it named", p)
	}
	if p := v.filed("a").differs(fence.StateDone, h('9')); !strings.Contains(p, "its cert's hash is "+h('a')) {
		t.Errorf("a cert filed under another hash: %q, want its own named", p)
	}
	rep := v.finish()
	if rep.Parents != 3 || rep.Linked != 1 || len(rep.Unresolved) != 1 || rep.Unresolved[0].Intent != "f" {
		t.Errorf("parents %d, linked %d, unresolved %+v; want 3, 1 and f's", rep.Parents, rep.Linked, rep.Unresolved)
	}
	var upper bool
	for _, p := range rep.Problems {
		upper = upper || p.Intent == "g" && strings.Contains(p.What, "is not a cert hash")
	}
	if !upper {
		t.Errorf("a parent in capitals was not refused: %+v", rep.Problems)
	}
}
