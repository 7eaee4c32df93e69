package sqlite_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
	"github.com/effectfence/effectfence/pkg/store/sqlite"
)

// docs/CERTS.md: "arguments nested more than 9,936 levels deep are refused at prepare". On a
// real ledger file: arguments nested exactly 9,936 levels are admitted, recorded, and replayed
// after the file is opened again, their cert verifying; one level more is an input error
// (nothing may run) and leaves no record.
func TestArgsNestingLimitAtPrepare(t *testing.T) {
	if fence.MaxNesting != 9936 {
		t.Fatalf("fence.MaxNesting is %d; docs/CERTS.md says 9,936", fence.MaxNesting)
	}
	nested := func(n int) []byte { return []byte(strings.Repeat("[", n) + strings.Repeat("]", n)) }
	path := filepath.Join(t.TempDir(), "ledger.db")
	eng := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})

	deep := fence.Request{Intent: "deep:at-the-limit", Tool: "t", Args: nested(fence.MaxNesting)}
	adm, err := eng.Prepare(ctx, deep)
	if err != nil || !adm.Fresh() {
		t.Fatalf("arguments nested %d levels: %+v %v; want admitted", fence.MaxNesting, adm, err)
	}
	cert, err := eng.Commit(ctx, *adm.Ticket, []byte(`"ok"`))
	if err != nil {
		t.Fatal(err)
	}

	over := fence.Request{Intent: "deep:beyond", Tool: "t", Args: nested(fence.MaxNesting + 1)}
	_, err = eng.Prepare(ctx, over)
	var inv fence.InvalidError
	if !errors.As(err, &inv) || fence.CodeOf(err) != fence.CodeInvalid || !strings.Contains(err.Error(), "nested deeper than 9936 levels") {
		t.Fatalf("arguments nested %d levels: %v; want an input error naming the limit", fence.MaxNesting+1, err)
	}
	if s, err := eng.Status(ctx, over.Intent); err != nil || s.State != fence.StateNone {
		t.Fatalf("the refused call left %+v (%v); want no record", s, err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}

	again := fence.New(openT(t, path, sqlite.Options{}), fence.Config{})
	adm, err = again.Prepare(ctx, deep)
	if err != nil || adm.Fresh() || adm.Cert.Hash != cert.Hash {
		t.Fatalf("the duplicate after a reopen: %+v %v; want the replay of %s", adm, err, cert.Hash)
	}
	if err := adm.Cert.Verify(); err != nil {
		t.Fatalf("the replayed cert: %v", err)
	}
}
