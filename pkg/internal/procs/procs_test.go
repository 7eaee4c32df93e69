package procs_test

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"

	"github.com/effectfence/effectfence/pkg/internal/procs"
)

func TestChildren(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if !slices.Contains(procs.Children(os.Getpid(), false), pid) {
		t.Fatalf("the running child %d is not listed", pid)
	}
	_ = cmd.Process.Kill()
	// Not yet reaped: a zombie, listed only when asked for.
	for i := 0; i < 200 && slices.Contains(procs.Children(os.Getpid(), false), pid); i++ {
		exec.Command("true").Run() // let time pass without sleeping on a clock
	}
	if slices.Contains(procs.Children(os.Getpid(), false), pid) || !slices.Contains(procs.Children(os.Getpid(), true), pid) {
		t.Fatalf("the killed, unreaped child %d: want it listed as a zombie only", pid)
	}
	_ = cmd.Wait()
	if slices.Contains(procs.Children(os.Getpid(), true), pid) {
		t.Fatalf("the reaped child %d is still listed", pid)
	}
}
