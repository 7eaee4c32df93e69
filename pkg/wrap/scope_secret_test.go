package wrap_test

import (
	"bytes"
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docs/identity.md: the child's environment goes into the scope "hashed, never stored". A
// token in wrap's environment (the usual way an MCP server gets its API key) must appear in
// no file wrap writes (the default ledger file named after the scope, its WAL and shared
// memory), in wrap's log, or in what `effectfence ledger` shows an operator, whatever the
// call's outcome: done, replayed, or unknown after the server died. It must still count:
// another value is another scope.
func TestScopeEnvironmentValuesAreNeverStored(t *testing.T) {
	t.Parallel()
	const secret = "sk_live_scopeTOKEN_5f1c9e27a0d84b36"
	r := newRig(t)
	r.ledger = "" // the default file, named after the scope
	r.extraEnv = []string{"PAYMENTS_API_TOKEN=" + secret}
	w := r.wrap()
	call(t, w.Session, "charge", `{"amount":7}`)
	if x := call(t, w.Session, "charge", `{"amount":7}`); !x.replayed() {
		t.Fatalf("the duplicate was not replayed: %+v", x)
	}
	if x := call(t, w.Session, "die", `{"tag":"env"}`); !x.IsError {
		t.Fatalf("the call the server died in: %+v", x)
	}
	w.Close()
	log := w.log.String()

	// The value counts: with another token, the same command in the same directory is
	// another scope (another default file), and the charge runs there.
	scopeOf := func(log string) string {
		m := regexp.MustCompile(`effectfence wrap: scope ([0-9a-f]{16}): `).FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("no scope line in the log:\n%s", log)
		}
		return m[1]
	}
	r.extraEnv = []string{"PAYMENTS_API_TOKEN=" + secret + "x"}
	w2 := r.wrap()
	if x := call(t, w2.Session, "charge", `{"amount":7}`); x.replayed() || x.IsError {
		t.Fatalf("another token received the first scope's receipt: %+v", x)
	}
	w2.Close()
	if scopeOf(log) == scopeOf(w2.log.String()) {
		t.Fatal("the token's value did not go into the scope")
	}

	// What an operator sees of the first scope's ledger.
	ledgers, _ := filepath.Glob(filepath.Join(r.dir, "state", "effectfence", "wrap-"+scopeOf(log)+".db"))
	if len(ledgers) != 1 {
		t.Fatalf("the default ledger of the scope is missing: %v", ledgers)
	}
	var shown bytes.Buffer
	for _, args := range [][]string{{"ls", "--json"}, {"export"}, {"stats"}} {
		out, err := exec.Command(efBin, append(append([]string{"ledger"}, args...), "--ledger", ledgers[0])...).CombinedOutput()
		if err != nil {
			t.Fatalf("ledger %v: %v\n%s", args, err, out)
		}
		shown.Write(out)
	}
	if !strings.Contains(shown.String(), "wrap:charge:") || !strings.Contains(shown.String(), "wrap:die:") {
		t.Fatalf("the ledger does not show the calls:\n%s", shown.String())
	}

	forms := []string{secret, base64.StdEncoding.EncodeToString([]byte(secret)), base64.RawURLEncoding.EncodeToString([]byte(secret))}
	check := func(where string, b []byte) {
		t.Helper()
		for _, f := range forms {
			if bytes.Contains(b, []byte(f)) {
				t.Errorf("%s holds the environment value (as %q)", where, f)
			}
		}
	}
	check("wrap's log", []byte(log))
	check("ledger ls/export/stats", shown.Bytes())
	files := 0
	err := filepath.Walk(filepath.Join(r.dir, "state"), func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files++
		check(p, b)
		return nil
	})
	if err != nil || files == 0 {
		t.Fatalf("reading the state directory: %v, %d files", err, files)
	}
}
