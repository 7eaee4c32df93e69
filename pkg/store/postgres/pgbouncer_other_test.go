//go:build !unix

package postgres

import (
	"os/exec"
	"testing"
)

// poolerUser: elsewhere than on unix, PgBouncer runs as the test's own user.
func poolerUser(testing.TB, *exec.Cmd, string) {}
