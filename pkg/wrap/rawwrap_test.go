package wrap_test

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// rawWrap runs wrap with raw pipes, for input no MCP client would send.
type rawWrap struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stdout io.Closer
	log    *logBuf
}

func (r *rig) rawWrap(flags ...string) *rawWrap {
	r.t.Helper()
	argv := append(append([]string{"wrap"}, flags...), "--")
	argv = append(argv, r.childCmd()...)
	cmd := exec.Command(efBin, argv...)
	cmd.Env = append(os.Environ(), r.env()...)
	rw := &rawWrap{cmd: cmd, log: &logBuf{}}
	cmd.Stderr = rw.log
	var err error
	if rw.in, err = cmd.StdinPipe(); err != nil {
		r.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	rw.out, rw.stdout = bufio.NewReader(stdout), stdout
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() {
		rw.in.Close()
		if cmd.ProcessState == nil {
			_ = cmd.Wait()
		}
		if strings.Contains(rw.log.String(), "DATA RACE") {
			r.t.Errorf("race in the wrap process:\n%s", rw.log.String())
		}
	})
	return rw
}

// roundTrip writes one line and reads one line back.
func (rw *rawWrap) roundTrip(t *testing.T, line string) string {
	t.Helper()
	if _, err := io.WriteString(rw.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := rw.out.ReadString('\n')
	if err != nil {
		t.Fatalf("no answer to %s: %v; stderr: %s", line, err, rw.log.String())
	}
	return strings.TrimSpace(resp)
}

const initLine = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// initializedRawWrap is rawWrap after a successful initialize.
func (r *rig) initializedRawWrap(flags ...string) *rawWrap {
	r.t.Helper()
	rw := r.rawWrap(flags...)
	if got := rw.roundTrip(r.t, initLine); !strings.Contains(got, `"result"`) {
		r.t.Fatalf("initialize: %s", got)
	}
	return rw
}

// send writes one line and reads nothing.
func (rw *rawWrap) send(t *testing.T, line string) {
	t.Helper()
	if _, err := io.WriteString(rw.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
}
