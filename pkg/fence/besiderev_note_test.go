package fence_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/effectfence/effectfence/pkg/fence"
)

// TestNoteIsRemovedOnceItsClaimIsReleased: a retry that meets a claim given up releases it at
// once, which may be before the note of that claim is in the spool (it is written beside, as
// the call is answered). The note goes all the same once the claim's write returned: until the
// fix it stayed, nobody's to remove (the release had forgotten the claim before its note was
// recorded as written); in a spool shared with other ledgers (SpoolShared) for good.
func TestNoteIsRemovedOnceItsClaimIsReleased(t *testing.T) {
	spool := t.TempDir()
	for i := range 10 {
		s := newLandedStallStore()
		e := fence.New(s, fence.Config{LeaseTTL: time.Minute, SpoolDir: spool, SpoolShared: true})
		req := fence.Request{Intent: fmt.Sprintf("charge-%d", i), Tool: "charge", Args: []byte(`{"n":1}`)}
		givenUp(t, e, s, req)
		adm, err := e.Prepare(context.Background(), req) // the retry, at once
		if err != nil || !adm.Fresh() {
			s.open()
			t.Fatalf("the retry meeting the claim given up: %+v, %v; want it admitted", adm, err)
		}
		s.open() // the write given up returns
		// Empty, and still so 300 ms later: the note is written beside the call's answer, so
		// an empty spool alone may be one the note has not reached yet.
		deadline := time.Now().Add(5 * time.Second)
		var since time.Time
		for ; ; time.Sleep(10 * time.Millisecond) {
			des, _ := os.ReadDir(spool)
			if len(des) > 0 {
				since = time.Time{}
			} else if since.IsZero() {
				since = time.Now()
			} else if time.Since(since) > 300*time.Millisecond {
				break
			}
			if time.Now().After(deadline) {
				e.Close()
				left, _ := fence.SpoolFiles(spool)
				t.Fatalf("run %d: the spool 5 s after the claim given up was released and its write returned: %v; want it empty", i, left)
			}
		}
		e.Close()
	}
}
