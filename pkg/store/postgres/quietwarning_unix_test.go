//go:build unix

package postgres

import (
	"fmt"
	"testing"
)

// TestCancelledStandbyWaitIsHeardWhateverClientMinMessages: as
// TestClaimWhoseStandbyWaitIsEndedIsNotAdmittedWithoutIt's cancelled cases, with the
// database's client_min_messages set to error (ALTER DATABASE … SET, to quiet the notices
// and warnings applications do not read). A COMMIT whose wait for the synchronous standby is
// cancelled succeeds, and its WARNING is the store's only sign that the standby lacks the
// claim; at error the server does not send it. Before, the store then took the COMMIT as
// durable and admitted the claim, and after a failover its retry was admitted again: the
// effect twice.
func TestCancelledStandbyWaitIsHeardWhateverClientMinMessages(t *testing.T) {
	t.Parallel()
	for _, oneStatement := range []bool{false, true} {
		t.Run(fmt.Sprintf("one statement %v", oneStatement), func(t *testing.T) {
			claimWithEndedStandbyWait(t, oneStatement, "pg_cancel_backend", "ALTER DATABASE postgres SET client_min_messages = error")
		})
	}
}
