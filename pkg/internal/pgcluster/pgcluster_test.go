//go:build unix

package pgcluster

import (
	"fmt"
	"net"
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

// A first start whose port another process took after freePort chose it starts on another
// port: a parallel test's listener took one once in a full CI run, and the test failed
// ("could not bind IPv4 address: Address already in use").
func TestFirstStartOnATakenPortMovesOn(t *testing.T) {
	c := newCluster(t)
	c.run("initdb", "-D", c.Data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	c.configure()
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c.Port))
	if err != nil {
		t.Skipf("skipped: the chosen port was taken before the test could take it: %v", err)
	}
	defer l.Close()
	taken := c.Port
	c.Start()
	if c.Port == taken {
		t.Fatalf("the cluster kept the taken port %d", taken)
	}
	if got := c.Query("postgres", "SELECT 1::text"); got[0] != "1" {
		t.Fatalf("the cluster on port %d answers %v", c.Port, got)
	}
}
