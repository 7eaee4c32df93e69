package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// openPath opens a store with search_path set in the URL as an operator writes it,
// percent-encoded (a space as %20: pgx reads a + literally).
func openPath(t *testing.T, searchPath string) (*Store, error) {
	t.Helper()
	u, err := url.Parse(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", searchPath)
	q.Set("pool_min_conns", "1")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{URL: u.String(), MaxConns: 3})
	if err == nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func TestFirstPathElement(t *testing.T) {
	for in, want := range map[string]string{
		"a":                     "a",
		" Review_Case , public": "Review_Case",
		`"a,b", public`:         `"a,b"`,
		`"Q""x"`:                `"Q""x"`,
		`$user, public`:         `$user`,
	} {
		if got := firstPathElement(in); got != want {
			t.Errorf("firstPathElement(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSchemaSpellings: search_path=review_case and search_path=Review_Case reach the same
// tables, so they must take the same advisory locks and NOTIFY channel: one admission for an
// intent across both. A quoted "Review_Case" is another schema.
func TestSchemaSpellings(t *testing.T) {
	lower := testSchema(t) // effectfence_test_<pid>_<hex>, all lower case
	mixed := strings.ToUpper(lower[:1]) + lower[1:]
	a, err := openPath(t, lower)
	if err != nil {
		t.Fatal(err)
	}
	b, err := openPath(t, mixed)
	if err != nil {
		t.Fatal(err)
	}
	if a.Schema() != lower || b.Schema() != lower {
		t.Fatalf("resolved schemas %q and %q, want %q for both", a.Schema(), b.Schema(), lower)
	}
	if a.channel() != b.channel() || lockKey(a.schema, "intent", "x") != lockKey(b.schema, "intent", "x") {
		t.Fatal("two spellings of one schema derive different channels or lock keys")
	}
	oneAdmission(t, "spelling:1", fence.New(a, fence.Config{}), fence.New(b, fence.Config{}))

	quoted := `"` + mixed + `"`
	t.Cleanup(func() {
		_, _ = admin(t, "").Exec(context.Background(), "DROP SCHEMA IF EXISTS "+quoted+" CASCADE")
	})
	c, err := openPath(t, quoted)
	if err != nil {
		t.Fatal(err)
	}
	if c.Schema() != mixed {
		t.Fatalf("quoted spelling resolved to %q, want %q", c.Schema(), mixed)
	}
	if _, err := openPath(t, `"bad, name`); err == nil {
		t.Fatal("an unterminated quoted search_path was accepted")
	}
}

// TestQuotedUserFirstOnThePath: "$user" first in the URL's search_path is the role's schema,
// quoted or not, as the server reads it (its default is written "$user", public): both
// spellings open the ledger in the schema the session reaches, the same one, with one
// admission per intent across them.
func TestQuotedUserFirstOnThePath(t *testing.T) {
	ledger := testSchema(t)
	openSized(t, ledger, 2).Close()
	bare, err := openPath(t, "$user, "+ledger)
	if err != nil {
		t.Fatal(err)
	}
	quoted, err := openPath(t, `"$user", `+ledger)
	if err != nil {
		t.Fatalf(`search_path="$user", %s: %v`, ledger, err)
	}
	if bare.Schema() != ledger || quoted.Schema() != ledger {
		t.Fatalf(`$user resolved to %q, "$user" to %q; want %q`, bare.Schema(), quoted.Schema(), ledger)
	}
	oneAdmission(t, "user:1", fence.New(bare, fence.Config{}), fence.New(quoted, fence.Config{}))
}
