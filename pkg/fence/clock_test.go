package fence_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"strconv"
	"testing"

	"github.com/effectfence/effectfence/pkg/canon"
	"github.com/effectfence/effectfence/pkg/fence"
)

func TestVectorClockOrder(t *testing.T) {
	var zero fence.VectorClock
	a := zero.Tick("a")
	b := zero.Tick("b")
	ab := a.Merge(b).Tick("a")
	cases := []struct {
		x, y           fence.VectorClock
		le, concurrent bool
	}{
		{zero, a, true, false},
		{a, a, true, false},
		{a, b, false, true},
		{a, ab, true, false},
		{ab, a, false, false},
		{fence.VectorClock{"x": 0}, zero, true, false},
	}
	for i, c := range cases {
		if c.x.LE(c.y) != c.le || c.x.Concurrent(c.y) != c.concurrent {
			t.Errorf("case %d: %v vs %v: LE=%v Concurrent=%v", i, c.x, c.y, c.x.LE(c.y), c.x.Concurrent(c.y))
		}
	}
	if len(zero) != 0 || a["a"] != 1 || ab["a"] != 2 || ab["b"] != 1 {
		t.Fatalf("Tick/Merge changed their receiver or computed wrong: %v %v %v", zero, a, ab)
	}
}

func TestVectorClockZeroEntries(t *testing.T) {
	x := fence.VectorClock{"a": 1, "b": 0}
	y := fence.VectorClock{"a": 1}
	if !x.Equal(y) || x.Digest() != y.Digest() {
		t.Fatal("zero entries changed equality or digest")
	}
	var empty fence.VectorClock
	if empty.Digest() != (fence.VectorClock{"z": 0}).Digest() || string(empty.Canonical()) != "{}" {
		t.Fatal("empty clock")
	}
	raw, _ := json.Marshal(x)
	if string(raw) != `{"a":1}` {
		t.Fatalf("json = %s", raw)
	}
	var back fence.VectorClock
	if err := json.Unmarshal([]byte(`{"a":1,"b":0}`), &back); err != nil || !back.Equal(y) {
		t.Fatalf("unmarshal: %v %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"a":-1}`), &back); err == nil {
		t.Fatal("negative counter accepted")
	}
}

// FuzzVectorClockDigest checks that the hand-written canonical form is exactly what the JCS
// library makes of the same clock, and that zero entries never matter.
func FuzzVectorClockDigest(f *testing.F) {
	f.Add("a", uint64(1), "b", uint64(0), "\u00e9\U0001F600", uint64(7))
	f.Add("", uint64(0), "\"\\\n", uint64(1<<53), "\ufffd", uint64(3))
	f.Add("Z", uint64(2), "a", uint64(2), "\U00010000", uint64(1))
	f.Fuzz(func(t *testing.T, k1 string, v1 uint64, k2 string, v2 uint64, k3 string, v3 uint64) {
		// JCS numbers are IEEE doubles: counters beyond 2^53 are outside the canonical form.
		const maxExact = 1 << 53
		if v1 > maxExact || v2 > maxExact || v3 > maxExact {
			return
		}
		var c fence.VectorClock
		if err := json.Unmarshal(mustJSON(map[string]uint64{k1: v1, k2: v2, k3: v3}), &c); err != nil {
			t.Fatal(err)
		}
		lib, err := canon.Marshal(map[string]uint64(c.Normal()))
		if err != nil {
			t.Fatal(err)
		}
		if c.Normal() == nil {
			lib = []byte("{}")
		}
		if string(c.Canonical()) != string(lib) {
			t.Fatalf("canonical %s, library %s", c.Canonical(), lib)
		}
		withZero := c.Merge(fence.VectorClock{"zero-entry": 0})
		if withZero.Digest() != c.Digest() || !withZero.Equal(c) {
			t.Fatal("a zero entry changed the digest")
		}
	})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// A claim's clock is its request's clock ticked for its agent, whether the engine builds it
// or reuses one it built for an earlier claim of the same agent (200 agents share 64 slots).
func TestClaimClocks(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	for round := range 2 {
		for i := range 200 {
			agent := "agent-" + strconv.Itoa(i)
			cases := []struct {
				in, want fence.VectorClock
			}{
				{nil, fence.VectorClock{agent: 1}},
				{fence.VectorClock{"other": 0}, fence.VectorClock{agent: 1}},
				{fence.VectorClock{"other": 2}, fence.VectorClock{agent: 1, "other": 2}},
				{fence.VectorClock{agent: 4}, fence.VectorClock{agent: 5}},
			}
			for j, c := range cases {
				intent := fmt.Sprintf("i-%d-%d-%d", round, i, j)
				adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "t", Agent: agent, Clock: c.in})
				if err != nil {
					t.Fatal(err)
				}
				cert, err := eng.Commit(ctx, *adm.Ticket, nil)
				if err != nil {
					t.Fatal(err)
				}
				if !cert.Clock.Equal(c.want) || len(cert.Clock) != len(c.want) {
					t.Fatalf("%s with clock %v: cert clock %v, want %v", agent, c.in, cert.Clock, c.want)
				}
				if err := cert.Verify(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// Admission ticks the deciding agent's counter, so a request whose counter for that agent is
// at its maximum is refused: the tick wrapped it to zero, and the cert's clock ({} once the
// zero entry is dropped) came before every clock the agent had seen. Another agent's counter
// at the maximum is only carried.
func TestClockAtItsMaximumIsRefused(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	const top = ^uint64(0)
	_, err := eng.Prepare(ctx, fence.Request{Intent: "top", Tool: "t", Agent: "a", Clock: fence.VectorClock{"a": top, "b": 3}})
	var inv fence.InvalidError
	if !errors.As(err, &inv) || inv.Field != "vector_clock" {
		t.Fatalf("a clock whose agent's counter cannot be ticked: %v; want invalid_request on vector_clock", err)
	}
	if rec, err := eng.Status(ctx, "top"); err != nil || rec.State != fence.StateNone {
		t.Fatalf("the refused request left %+v, %v", rec, err)
	}
	adm, err := eng.Prepare(ctx, fence.Request{Intent: "top", Tool: "t", Agent: "b", Clock: fence.VectorClock{"a": top, "b": 3}})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := eng.Commit(ctx, *adm.Ticket, nil)
	if err != nil || !cert.Clock.Equal(fence.VectorClock{"a": top, "b": 4}) {
		t.Fatalf("another agent's counter at the maximum: cert clock %v, %v", cert.Clock, err)
	}
}

// A caller that changes the clock of a cert it got (building its next request's clock in
// place, say) changes its own copy's map, and so the records that share it; it must not change
// the clock the engine gives the next claims of that agent: those certs would name counters
// no request brought, hashed in for good.
func TestChangedCertClockDoesNotReachLaterClaims(t *testing.T) {
	ctx := context.Background()
	eng := fence.New(fence.NewMemoryStore(), fence.Config{})
	commit := func(intent string) *fence.Cert {
		t.Helper()
		adm, err := eng.Prepare(ctx, fence.Request{Intent: intent, Tool: "t", Agent: "billing"})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	first := commit("first")
	first.Clock["billing"] = 7 // the caller's mistake
	first.Clock["planner"] = 3
	for _, intent := range []string{"second", "third"} {
		cert := commit(intent)
		if want := (fence.VectorClock{"billing": 1}); !cert.Clock.Equal(want) || len(cert.Clock) != 1 {
			t.Fatalf("%s: cert clock %v, want %v", intent, cert.Clock, want)
		}
	}
}

// "Methods never modify their receiver": every method, on clocks with a zero entry, a counter
// at its maximum and hostile agent names, leaves both clocks as they were (their zero entries
// too).
func TestVectorClockMethodsLeaveTheirClocks(t *testing.T) {
	x := fence.VectorClock{"a": 1, "zero": 0, "\x00": 3, "'; --": 2}
	y := fence.VectorClock{"a": 4, "b": math.MaxUint64, "\u2028": 1}
	wantX, wantY := maps.Clone(x), maps.Clone(y)
	_ = x.Tick("a")
	_ = x.Tick("new")
	_ = x.Merge(y)
	_ = y.Merge(x)
	_ = x.LE(y)
	_ = x.Equal(y)
	_ = x.Concurrent(y)
	_ = x.Normal()
	_ = x.Canonical()
	_ = x.Digest()
	if _, err := json.Marshal(x); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(x, wantX) || !maps.Equal(y, wantY) {
		t.Fatalf("clocks changed: %v (was %v), %v (was %v)", x, wantX, y, wantY)
	}
	if m := x.Merge(y); m["b"] != math.MaxUint64 || m["a"] != 4 || m["\x00"] != 3 || !x.LE(m) || !y.LE(m) {
		t.Fatalf("merge = %v", m)
	}
}
