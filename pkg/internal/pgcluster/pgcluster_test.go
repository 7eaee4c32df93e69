//go:build unix

package pgcluster

import (
	"testing"
)

// The helper itself: a committed row survives a crash of every server process; a standby made
// synchronous has every acknowledged row when promoted, and then takes writes.
func TestCrashRestartAndFailover(t *testing.T) {
	c := New(t)
	c.Exec("postgres", "CREATE TABLE t (v int)")
	c.Exec("postgres", "INSERT INTO t VALUES (1)")
	pm := c.Postmaster()
	c.Crash()
	if alive(pm) {
		t.Fatalf("postmaster %d survived Crash", pm)
	}
	if err := c.TryExec("postgres", "SELECT 1"); err == nil {
		t.Fatal("the crashed server still answers")
	}
	c.Start()
	if got := c.Query("postgres", "SELECT count(*)::text FROM t"); got[0] != "1" {
		t.Fatalf("after crash recovery: %v rows", got)
	}
	s := c.Standby()
	c.SetSynchronous(true)
	c.Exec("postgres", "INSERT INTO t VALUES (2)")
	c.Crash()
	s.Promote()
	if got := s.Query("postgres", "SELECT count(*)::text FROM t"); got[0] != "2" {
		t.Fatalf("the promoted synchronous standby has %v rows, want 2", got)
	}
	s.Exec("postgres", "INSERT INTO t VALUES (3)")
}
