package httpfront_test

import (
	"net/http"
	"testing"

	"github.com/effectfence/effectfence/pkg/httpfront"
	"github.com/effectfence/effectfence/pkg/wrap"
)

// docs/gateway.md, Endpoints: a session belongs to the principal that opened it; another
// principal's requests naming it get 404 whatever the method. Bob can neither end Alice's
// session (DELETE) nor read its server's stream (GET), and her session goes on.
func TestAnotherPrincipalCannotEndOrReadASession(t *testing.T) {
	t.Parallel()
	alice, bob := "alice-token-0123456789", "bob-token-0123456789ab"
	g := newGW(t, func(c *httpfront.Config, _ *wrap.Options) {
		c.Keys = map[string]string{alice: "alice", bob: "bob"}
	})
	ah := hdr{"Authorization": "Bearer " + alice}
	sid := g.open(ah)
	do := func(method, token, accept string) int {
		t.Helper()
		req, _ := http.NewRequest(method, g.url, nil)
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Authorization", "Bearer "+token)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := do(http.MethodDelete, bob, ""); code != http.StatusNotFound {
		t.Fatalf("bob's DELETE of alice's session: status %d, want 404", code)
	}
	if code := do(http.MethodGet, bob, "text/event-stream"); code != http.StatusNotFound {
		t.Fatalf("bob's GET of alice's session: status %d, want 404", code)
	}
	if g.front.Sessions() != 1 {
		t.Fatalf("%d sessions after bob's requests, want alice's 1", g.front.Sessions())
	}
	if r := g.mustPost(sid, ah, `{"jsonrpc":"2.0","id":2,"method":"ping"}`); r.status != http.StatusOK {
		t.Fatalf("alice's session after bob's requests: status %d %v", r.status, r.raw)
	}
	if code := do(http.MethodDelete, alice, ""); code != http.StatusOK {
		t.Fatalf("alice's DELETE of her session: status %d, want 200", code)
	}
}
