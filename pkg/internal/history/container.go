//go:build linux

package history

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/effectfence/effectfence/pkg/internal/procs"
)

// Containers (Config.Containers): every other wrap slot (0, 2, …) runs each of its wraps in a
// PID namespace of its own below the harness's, as a container on this host:
//
//	unshare --pid --fork --mount-proc --kill-child -- sh -c '"$@"; while sleep 1; do :; done' sh WRAP…
//
// The shell is the container's init, so the wrap is not pid 1 and its kill -9 does not end the
// namespace by itself (as tini or docker-init in a container); --mount-proc gives the
// namespace a /proc of its own, so a wrap there judges holders by the pids it can see. A wrap
// on the host then judges a container's holder through its own /proc (pkg/fence
// nested_linux.go: alive while it runs, never dead); a wrap in a container judges the host's
// holders and the other container's as out of sight (cannot tell: fenced only once the lease
// lapses). The nemesis kills and stops the wrap and its child by their pids on the host, never
// the unshare process or the init. A wrap's child dies with it (its parent-death signal), so
// once the wrap is gone its namespace holds only the init: the harness then kills the init,
// which ends the namespace, and the slot's next wrap gets a new one. When the run ends every
// namespace is gone (checked); --kill-child ends one with its unshare, which dies with the
// harness (its parent-death signal), so a harness killed midway leaves no namespace running
// either.

// containerScript is the init's shell script: it runs the wrap ("$@"), then stays.
const containerScript = `"$@"; while sleep 1; do :; done`

// contained reports whether slot i runs its wraps in containers.
func (r *run) contained(i int) bool { return r.cfg.Containers && i%2 == 0 }

// containerSlots lists the slots that run in containers.
func (r *run) containerSlots() []int {
	var out []int
	for i := range r.cfg.Wraps {
		if r.contained(i) {
			out = append(out, i)
		}
	}
	return out
}

// checkContainers says why containers cannot be made here: not root, no unshare, or an unshare
// that cannot create a PID namespace with its own /proc (a sandbox that forbids it).
func checkContainers() (string, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("history: containers need root (unshare --pid --mount-proc)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return "", fmt.Errorf("history: containers need the unshare command (util-linux): %w", err)
	}
	out, err := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "--", "sh", "-c", "echo $$").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		return "", fmt.Errorf("history: containers: %s --pid --fork --mount-proc cannot make a PID namespace here: %v: %s", unshare, err, strings.TrimSpace(string(out)))
	}
	return unshare, nil
}

// containerPrefix is the argv before the wrap's for a slot that runs in containers, else nil.
func (w *wrapSlot) containerPrefix() []string {
	if !w.r.contained(w.i) {
		return nil
	}
	return []string{w.r.unshare, "--pid", "--fork", "--mount-proc", "--kill-child", "--", "sh", "-c", containerScript, "sh"}
}

// hostProc is a process as this process's /proc shows it: its pid and start time (clock ticks
// since boot), so a pid reused by another process is not taken for it.
type hostProc struct {
	pid   int
	start string
}

// look reads pid's start time and state; ok is false when it is gone or a zombie.
func look(pid int) (start string, comm string, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", "", false
	}
	s := string(b)
	i, j := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if i < 0 || j < i {
		return "", "", false
	}
	f := strings.Fields(s[j+1:]) // state ppid pgrp … starttime (field 22 of stat, index 19 here)
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", "", false
	}
	return f[19], s[i+1 : j], true
}

func (p hostProc) alive() bool {
	start, _, ok := look(p.pid)
	return ok && start == p.start
}

func (p hostProc) kill() {
	if p.alive() {
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
	}
}

// nsPid is pid's number in its own PID namespace (the last field of NSpid), 0 when unread.
func nsPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.Atoi(f[len(f)-1])
				return n
			}
		}
	}
	return 0
}

// containerProc is a wrap in a container: the proc the harness started (unshare's), with the
// wrap's and the init's host pids. Pid is the wrap's, what the nemesis kills and stops.
type containerProc struct {
	proc
	wrap, init hostProc
	http       bool          // the orderly stop is SIGTERM to the wrap (a gateway), not stdin's end
	gone       chan struct{} // closed once the wrap is gone and the namespace killed
	closeOnce  sync.Once
}

// contain finds the init and the wrap of the container p started (the init is unshare's only
// child, the wrap the init's) and watches the wrap: once it is gone, the init is killed and
// the namespace ends with it, which ends p.
func (w *wrapSlot) contain(p proc) (*containerProc, error) {
	c := &containerProc{proc: p, http: w.r.cfg.Front == "http", gone: make(chan struct{})}
	bin := filepath.Base(w.r.cfg.Bin)
	if len(bin) > 15 {
		bin = bin[:15] // comm's length
	}
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c.init, c.wrap, err = containerPids(p.Pid(), bin); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	w.r.addInit(c.init)
	fmt.Fprintf(w.log, "--- history: wrap %d in a container: pid %d on the host (%d there), its init pid %d\n", w.i, c.wrap.pid, nsPid(c.wrap.pid), c.init.pid)
	go c.watch()
	return c, nil
}

// containerPids finds the init (unshare's only child) and the wrap (the init's only child,
// running bin) of the container whose unshare is pid.
func containerPids(pid int, bin string) (init, wrap hostProc, err error) {
	kids := procs.Children(pid, false)
	if len(kids) != 1 {
		return init, wrap, fmt.Errorf("history: unshare %d has %d children, want its container's init alone", pid, len(kids))
	}
	init.pid = kids[0]
	var ok bool
	if init.start, _, ok = look(init.pid); !ok {
		return init, wrap, fmt.Errorf("history: the container's init %d is gone", init.pid)
	}
	kids = procs.Children(init.pid, false)
	if len(kids) != 1 {
		return init, wrap, fmt.Errorf("history: the container's init %d has %d children, want the wrap alone", init.pid, len(kids))
	}
	wrap.pid = kids[0]
	start, comm, ok := look(wrap.pid)
	if !ok || comm != bin {
		return init, wrap, fmt.Errorf("history: the container's init %d runs %q (pid %d), not the wrap %s", init.pid, comm, wrap.pid, bin)
	}
	wrap.start = start
	return init, wrap, nil
}

// watch waits for the wrap to be gone (killed, or stopped in order), then kills the init: the
// namespace, holding nothing else by then (the wrap's child died with it), ends, and so does
// unshare. If unshare ends first, the wrap and the init are killed too.
func (c *containerProc) watch() {
	defer close(c.gone)
	for c.wrap.alive() {
		select {
		case <-c.proc.Done():
			c.wrap.kill()
		case <-time.After(50 * time.Millisecond):
		}
	}
	c.init.kill()
}

func (c *containerProc) Pid() int { return c.wrap.pid }

// Close is the wrap's orderly stop (stdin's end, or SIGTERM to a gateway), after which the
// namespace ends; a wrap that lingers is killed with its namespace.
func (c *containerProc) Close() error {
	c.closeOnce.Do(func() {
		if c.wrap.alive() {
			_ = syscall.Kill(c.wrap.pid, syscall.SIGCONT) // a stopped wrap cannot stop
			if c.http {
				_ = syscall.Kill(c.wrap.pid, syscall.SIGTERM)
				select {
				case <-c.gone:
				case <-time.After(5 * time.Second):
				}
			}
		}
		_ = c.proc.Close()
		c.wrap.kill()
		c.init.kill()
		<-c.gone
	})
	return nil
}

// addInit records a container's init, to check at the end that every namespace is gone.
func (r *run) addInit(p hostProc) {
	r.mu.Lock()
	r.inits = append(r.inits, p)
	r.mu.Unlock()
}

// endContainers kills any container's init still running (none should be: each ends with its
// wrap) and waits for it to be gone; it says which were left.
func (r *run) endContainers() error {
	r.mu.Lock()
	inits := append([]hostProc(nil), r.inits...)
	r.mu.Unlock()
	var left []string
	for _, p := range inits {
		if !p.alive() {
			continue
		}
		left = append(left, strconv.Itoa(p.pid))
		p.kill()
		for i := 0; i < 100 && p.alive(); i++ {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("history: the inits of %d containers still ran after their wraps stopped (pids %s), killed now", len(left), strings.Join(left, ", "))
	}
	return nil
}
