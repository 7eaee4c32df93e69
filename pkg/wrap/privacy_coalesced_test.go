package wrap_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// docs/privacy.md: with --keep-result TOOL=hash "the first caller (the one that ran the tool)
// still gets the real result; callers that waited for it to finish (coalesced duplicates) are
// duplicates and get the 'not kept' answer". Eight identical calls reach the real wrap while
// the first one is held inside the server; once it ends, exactly one answer holds the tool's
// result, the seven others say it was not kept, and the tool ran once.
func TestCoalescedDuplicatesOfAHashOnlyCallAreNotHandedTheResult(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	w := r.wrap("--keep-result", "slow=hash")
	release := filepath.Join(r.dir, "release")
	args := `{"tag":"hashed","until":"` + release + `"}`
	var got []result
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		got = storm(t, w.Session, 8, "slow", args)
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(w.log.String(), "slow tag=hashed started") {
		if time.Now().After(deadline) {
			t.Fatalf("the call never reached the server:\n%s", w.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // room for the duplicates to arrive and wait; a late one is replayed, with the same answer
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	real, notKept := 0, 0
	for _, x := range got {
		switch {
		case x.IsError:
			t.Fatalf("an error: %+v", x)
		case strings.Contains(x.text(), "slow done"):
			if x.replayed() {
				t.Fatalf("a duplicate was handed the result: %s", x.text())
			}
			real++
		case string(x.Meta["effectfence/result_not_kept"]) == "true" && strings.Contains(x.text(), "not kept"):
			notKept++
		default:
			t.Fatalf("an answer neither the result nor not kept: %+v %s", x, x.text())
		}
	}
	w.Close()
	if real != 1 || notKept != 7 || r.effectCount() != 1 {
		t.Fatalf("%d results, %d not kept, %d runs; want 1, 7, 1", real, notKept, r.effectCount())
	}
}
