package fence

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
	"unsafe"
)

// fillEveryField sets every field of the struct v points to to a value of its own, distinct
// from the zero value, so that a copy that leaves a field behind shows (a field added to
// Record or Cert later included).
func fillEveryField(t *testing.T, v any) {
	t.Helper()
	s := reflect.ValueOf(v).Elem()
	for i := 0; i < s.NumField(); i++ {
		f, name := s.Field(i), s.Type().Field(i).Name
		switch x := f.Addr().Interface().(type) {
		case *string:
			*x = "s-" + name
		case *State:
			*x = State("state-" + name)
		case *KeepResult:
			*x = KeepHash
		case *uint64:
			*x = uint64(1000 + i)
		case *bool:
			*x = true
		case *json.RawMessage:
			*x = json.RawMessage(fmt.Sprintf(`{"%s":%d}`, name, i))
		case *[]byte:
			*x = []byte("b-" + name)
		case *[]string:
			*x = []string{"p-" + name}
		case *[]ReadSetEntry:
			*x = []ReadSetEntry{{Domain: "d-" + name, Seq: uint64(i)}}
		case *VectorClock:
			*x = VectorClock{"a-" + name: uint64(i)}
		case *time.Time:
			*x = time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC)
		case **Cert:
			*x = &Cert{Intent: "c-" + name}
		default:
			t.Fatalf("fillEveryField: no value for %s (%s); add one", name, f.Type())
		}
	}
}

// TestDoneRecordCopiesEveryField: the done record doneRecord writes field by field is the
// claim with its state, times, reason and cert replaced, as a copy of the whole claim would
// be; and Cert.copy copies every field.
func TestDoneRecordCopiesEveryField(t *testing.T) {
	e := New(NewMemoryStore(), Config{})
	var claim Record
	fillEveryField(t, &claim)
	claim.KeepResult = KeepFull
	claim.Seq = 7 // a cert's seq is at most 2^53
	now := time.Date(2026, 2, 3, 4, 5, 6, 7, time.UTC)
	done, err := e.doneRecord(&claim, []byte(`{"ok":true}`), now)
	if err != nil {
		t.Fatal(err)
	}
	want := claim
	want.State, want.UpdatedAt, want.ExpiresAt, want.Reason, want.Cert = StateDone, now, now.Add(e.cfg.ResultTTL), "", done.Cert
	if !reflect.DeepEqual(*done, want) {
		t.Errorf("done record\n%+v\nwant the claim as done\n%+v", *done, want)
	}
	if done.Cert == nil || done.Cert == claim.Cert {
		t.Error("the done record has no cert of its own")
	}
	if h, err := done.Cert.ComputeHash(); err != nil || h != done.Cert.Hash {
		t.Errorf("cert hash %q; recomputed %q, %v", done.Cert.Hash, h, err)
	}

	var c Cert
	fillEveryField(t, &c)
	if cp := c.copy(); !reflect.DeepEqual(*cp, c) || cp == &c {
		t.Errorf("Cert.copy = %+v; want a new %+v", *cp, c)
	}
}

// TestRecordObjectsStaySmall: the objects every fresh call leaves for the collector (the claim
// with its ticket, the done record, the cert with its digests) stay within the 512 bytes up to
// which the collector marks objects span by span, in allocation order; a larger one is marked
// alone, in the order the memory store's map finds it (see doneRecord). A field added to
// Record, Ticket or Cert that crosses the line fails here rather than only in a benchmark.
func TestRecordObjectsStaySmall(t *testing.T) {
	const small = 512
	for name, size := range map[string]uintptr{
		"claimAlloc (claim and ticket)":    unsafe.Sizeof(claimAlloc{}),
		"Record (done record)":             unsafe.Sizeof(Record{}),
		"certAlloc (cert and its digests)": unsafe.Sizeof(certAlloc{}),
	} {
		if size > small {
			t.Errorf("%s is %d bytes; more than %d", name, size, small)
		}
	}
}
