//go:build linux

package history

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/effectfence/effectfence/pkg/httpback"
	"github.com/effectfence/effectfence/pkg/mcpstdio"
)

// The HTTP front of a run: each wrap slot is `effectfence wrap --listen 127.0.0.1:PORT` (the
// port kept across restarts, so a restarted gateway is found where the dead one was), and its
// clients share one Streamable HTTP session of it through pkg/httpback, re-initialized when a
// restarted gateway no longer knows it. The faults are the same: kill -9 and SIGSTOP of the
// gateway and of its child, database cuts.

// httpProc is one gateway process and the HTTP client of it.
type httpProc struct {
	cmd  *exec.Cmd
	up   *httpback.Upstream
	done chan struct{} // closed when the process has exited
	err  error         // why, set before done closes
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (w *wrapSlot) spawnHTTP(env []string) (proc, error) {
	if w.port == 0 {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		w.port = p
	}
	cfg := w.r.cfg
	argv := []string{cfg.Bin, "wrap", "--ledger", w.r.ledger, "--scope", "history", "--listen", "127.0.0.1:" + strconv.Itoa(w.port),
		"--lease-secs", strconv.FormatFloat(cfg.Lease.Seconds(), 'f', -1, 64), "--wait", "5s", "--grace", "1s", "--"}
	argv = append(append(w.containerPrefix(), argv...), cfg.Child...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	if w.r.contained(w.i) {
		// unshare dies with the harness, and the container with it (--kill-child).
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &httpProc{cmd: cmd, done: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(w.log, line)
			if u, ok := strings.CutPrefix(line, "effectfence wrap: listening on "); ok {
				select {
				case listening <- u:
				default:
				}
			}
		}
		err := cmd.Wait()
		if err == nil {
			err = errors.New("the gateway exited")
		}
		p.err = fmt.Errorf("gateway: %w", err)
		close(p.done)
	}()
	select {
	case u := <-listening:
		p.up = httpback.NewUpstream(httpback.Config{URL: u, Init: mcpstdio.DefaultInit("history-client", "1"), InitTimeout: 30 * time.Second, Log: w.log})
		return p, nil
	case <-p.done:
		return nil, p.err
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-p.done
		return nil, errors.New("the gateway did not start listening within 30 s")
	}
}

// CallTool calls through the gateway's session, opening a new one if the gateway lost it.
func (p *httpProc) CallTool(ctx context.Context, name string, args json.RawMessage) (json.RawMessage, error) {
	s, err := p.up.Session(ctx)
	if err != nil {
		return nil, err
	}
	params, err := json.Marshal(map[string]any{"name": name, "arguments": args})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", mcpstdio.ErrNotSent, err)
	}
	return s.Call(ctx, "tools/call", params)
}

func (p *httpProc) Done() <-chan struct{} { return p.done }

func (p *httpProc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

func (p *httpProc) Pid() int { return p.cmd.Process.Pid }

// Close is the gateway's orderly stop: SIGTERM (it drains for its grace), then SIGKILL if it
// lingers.
func (p *httpProc) Close() error {
	_ = p.up.Close()
	_ = p.cmd.Process.Signal(syscall.SIGCONT) // a stopped gateway cannot stop
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return nil
}
