package wrap_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
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

// chargeLine is a tools/call line of the test server's charge tool, amount 1, for order.
func chargeLine(id int, order string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"charge","arguments":{"amount":1,"order":%q}}}`, id, order)
}

// warmWrap starts an initialized raw wrap on r with flags, whose stderr is printed when t
// fails (or runs verbose), and makes one call through it, so that the claim a test then holds
// up is sent on a warm ledger; it returns the wrap and the effects counted after that call.
func (r *rig) warmWrap(t *testing.T, flags ...string) (*rawWrap, int) {
	t.Helper()
	rw := r.initializedRawWrap(flags...)
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			t.Logf("wrap's stderr:\n%s", rw.log.String())
		}
	})
	if got := rw.roundTrip(t, chargeLine(1, "warm")); strings.Contains(got, `"isError":true`) {
		t.Fatalf("the first call: %s", got)
	}
	return rw, r.effectCount()
}

// refusedWhileHeld sends line, a call whose claim an adversary holds up (held says how), and
// reads its answer: it must come within 40 s and say the call was NOT executed (store_error).
// undo gives the adversary back: on every way out, so the test goes on with the ledger free.
func (rw *rawWrap) refusedWhileHeld(t *testing.T, line string, undo func(), held string) {
	t.Helper()
	defer undo()
	rw.send(t, line)
	sent := time.Now()
	answer := make(chan string, 1)
	go func() {
		got, _ := rw.out.ReadString('\n')
		answer <- got
	}()
	var got string
	select {
	case got = <-answer:
	case <-time.After(40 * time.Second):
		t.Fatalf("no answer 40 s after the call, %s", held)
	}
	t.Logf("answered %s after the call, %s", time.Since(sent).Round(100*time.Millisecond), held)
	for _, want := range []string{`"isError":true`, `"effectfence/code":"store_error"`, "NOT executed"} {
		if !strings.Contains(got, want) {
			t.Fatalf("the call, %s: %s; want %s in it", held, got, want)
		}
	}
}
