//go:build unix

package pgcluster

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// Standalone outside a cluster: Fatalf and Skipf stop the function Catch runs with a
// *Failure (Skip only for Skipf), other panics are not swallowed, and Close runs the cleanups
// the last first, once.
func TestStandaloneCatch(t *testing.T) {
	var s Standalone
	var order []int
	s.Cleanup(func() { order = append(order, 1) })
	s.Cleanup(func() { order = append(order, 2) })
	after := false
	err := Catch(func() { s.Fatalf("no %s", "server"); after = true })
	var f *Failure
	if !errors.As(err, &f) || f.Skip || f.Msg != "no server" || after {
		t.Fatalf("Fatalf: err %v (%+v), went on %v", err, f, after)
	}
	err = Catch(func() { s.Skipf("SKIP-REQUIRED: %d", 1) })
	if !errors.As(err, &f) || !f.Skip || !strings.Contains(err.Error(), "SKIP-REQUIRED: 1") {
		t.Fatalf("Skipf: err %v", err)
	}
	if err := Catch(func() {}); err != nil {
		t.Fatalf("a function that returns: %v", err)
	}
	func() {
		defer func() {
			if v := recover(); v != "other" {
				t.Fatalf("another panic: recovered %v", v)
			}
		}()
		_ = Catch(func() { panic("other") })
	}()
	s.Close()
	s.Close()
	if len(order) != 2 || order[0] != 2 || order[1] != 1 {
		t.Fatalf("cleanups ran in order %v, want [2 1]", order)
	}
}

// A cluster made with a Standalone runs as one made in a test, and Close kills it and removes
// its directory.
func TestStandaloneCluster(t *testing.T) {
	Bin(t) // skips with SKIP-REQUIRED without the server binaries
	var s Standalone
	defer s.Close()
	var c *Cluster
	if err := Catch(func() {
		c = New(&s, "synchronous_commit = off")
		c.Exec("postgres", "CREATE TABLE t (v int)")
		c.Crash()
		c.Start()
	}); err != nil {
		t.Fatal(err)
	}
	// Start of a running cluster is a Failure the program gets back, not an exit.
	if err := Catch(c.Start); err == nil || !strings.Contains(err.Error(), "Start of a running cluster") {
		t.Fatalf("Start of a running cluster: %v", err)
	}
	if got := c.Query("postgres", "SHOW synchronous_commit"); got[0] != "off" {
		t.Fatalf("synchronous_commit %v", got)
	}
	pm := c.Postmaster()
	s.Close()
	if alive(pm) {
		t.Fatalf("postmaster %d survived Close", pm)
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Fatalf("the cluster's directory after Close: %v", err)
	}
}
