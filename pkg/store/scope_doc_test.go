package store_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/effectfence/effectfence/pkg/store"
)

// TestVolatileEnvIsTheDocumentedList: the variables docs/identity.md says are left out of a
// scope are exactly store.VolatileEnv. A variable left out but not documented merges two
// accounts whose configurations differ only in it; one documented but kept makes an operator
// expect receipts across launches that are not recognised.
func TestVolatileEnvIsTheDocumentedList(t *testing.T) {
	doc, err := os.ReadFile("../../docs/identity.md")
	if err != nil {
		t.Fatal(err)
	}
	_, list, ok := strings.Cut(string(doc), "Left out of the scope")
	list, _, ok2 := strings.Cut(list, "The list is `store.VolatileEnv`")
	if !ok || !ok2 {
		t.Fatal("docs/identity.md has no list of the variables left out of the scope")
	}
	_, list, _ = strings.Cut(list, "prefixes):")
	var documented []string
	for _, m := range regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*\\*?)`").FindAllStringSubmatch(list, -1) {
		documented = append(documented, m[1])
	}
	code := slices.Clone(store.VolatileEnv)
	slices.Sort(documented)
	slices.Sort(code)
	if !slices.Equal(documented, code) {
		t.Fatalf("docs/identity.md lists %q,\nstore.VolatileEnv is %q", documented, code)
	}
}
