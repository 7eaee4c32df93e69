package wrap_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/effectfence/effectfence/pkg/wrap"
)

// The on_unknown webhook is the URL the reviewed policy names (https, or http to this machine:
// docs/policy.md). An endpoint that answers with a redirect is not that URL's acceptance:
// the HTTP client followed it, so a 302 or 303 turned the POST into a GET without the event,
// whose 2xx counted as delivered (the event lost, and no retry or log line), and a 307 or
// 308 posted the event to wherever the Location said, on whatever scheme. A redirect is now a
// failed delivery, retried and logged like a 5xx, and nothing reaches the Location.
func TestOnUnknownHookRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			var (
				mu        sync.Mutex
				elsewhere []string
				hooked    int
			)
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				b, _ := io.ReadAll(req.Body)
				mu.Lock()
				elsewhere = append(elsewhere, req.Method+" "+string(b))
				mu.Unlock()
			}))
			defer other.Close()
			hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				mu.Lock()
				hooked++
				mu.Unlock()
				http.Redirect(w, req, other.URL+"/collect", status)
			}))
			defer hook.Close()

			r := newRig(t)
			x, _ := r.inproc(wrap.Options{OnUnknown: &wrap.Hook{URL: hook.URL + "/page", Retries: 1}}, initNoElicit, nil)
			intent := unknownCall(t, x)
			waitFor(t, "the hook's last attempt to be logged, or the redirect followed", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(elsewhere) > 0 || strings.Contains(x.log.String(), "on_unknown hook for intent "+intent+" failed after 2 attempt(s)")
			})
			x.close()
			mu.Lock()
			defer mu.Unlock()
			if len(elsewhere) > 0 || hooked != 2 {
				t.Fatalf("the hook URL was tried %d times (want 2) and the redirect's target got %q (want nothing); log:\n%s", hooked, elsewhere, x.log.String())
			}
			if log := x.log.String(); !strings.Contains(log, "attempt 1 failed") || !strings.Contains(log, fmt.Sprint(status)) || strings.Contains(log, "/collect") {
				t.Fatalf("the log must name the redirect as the failure, without its target:\n%s", log)
			}
		})
	}
}
