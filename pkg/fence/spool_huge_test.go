package fence_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/fence"
)

// A spool entry far larger than any outcome (a sparse file of 64 GiB, made by hand or by a
// tool gone wrong) was read whole into memory by every drain: the runtime's "fatal error:
// out of memory" ended every process opening the ledger (wrap, serve, ledger ls), found with
// the real binary on a 30 GiB file. The drain now names it and leaves it, as it does a file
// that is not an outcome.
func TestHugeSpoolFileIsNamedNotRead(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "0000000000000000-1.json")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 30); err != nil {
		f.Close()
		t.Skipf("no sparse file of 64 GiB here: %v", err)
	}
	f.Close()
	e := fence.New(fence.NewMemoryStore(), fence.Config{SpoolDir: dir})
	defer e.Close()
	n, err := e.DrainSpool(context.Background())
	if n != 0 || err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("drain: %d, %v; want the file named and left", n, err)
	}
	if _, serr := os.Stat(name); serr != nil {
		t.Fatalf("the file is gone: %v", serr)
	}
	t.Log(err)
}
