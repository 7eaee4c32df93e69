package probe

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Witness measures the effects of a tool independently of its answers: a number that each
// execution raises by one (rows in a table, lines in a file, charges in an account).
type Witness interface {
	Measure(ctx context.Context) (int64, error)
	String() string
}

// WitnessReport is the witness's two readings and their difference.
type WitnessReport struct {
	Command string      `json:"command"`
	Kind    WitnessKind `json:"kind"` // executions or state
	Before  int64       `json:"before"`
	After   int64       `json:"after"`
	Effects int64       `json:"effects"` // After - Before
}

// CommandWitness runs a shell command (sh -c, or cmd /C on Windows) and reads the first
// whole number in its output, so `wc -l < file`, `wc -l file` and
// `psql -tAc 'select count(*) from charges'` all work.
type CommandWitness struct {
	Command string
	Timeout time.Duration // 0: DefaultWitnessTimeout
}

// DefaultWitnessTimeout bounds one run of a witness command.
const DefaultWitnessTimeout = 30 * time.Second

func (w CommandWitness) String() string { return w.Command }

// Measure runs the command once and parses its number.
func (w CommandWitness) Measure(ctx context.Context) (int64, error) {
	if strings.TrimSpace(w.Command) == "" {
		return 0, errors.New("the witness command is empty")
	}
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = DefaultWitnessTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var cmd *exec.Cmd
	if runtime.GOOS == "windows" {
		cmd = exec.CommandContext(ctx, "cmd", "/C", w.Command)
	} else {
		cmd = exec.CommandContext(ctx, "sh", "-c", w.Command)
	}
	// A number is short: what is printed past maxWitnessOutput is drained, not kept (a
	// `cat charges.log` meant as `wc -l < charges.log` took the probe to gigabytes).
	stdout, stderr := &keepHead{max: maxWitnessOutput}, &keepHead{max: maxWitnessOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Killing the shell at the timeout leaves what it started ("kubectl get pods | wc -l")
	// holding the output pipes; without a WaitDelay, Run would wait for them however long
	// they take, and the timeout would bound nothing.
	cmd.WaitDelay = time.Second
	ownGroup(cmd)
	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) && ctx.Err() == nil {
		// The shell exited 0, but something it started in the background still holds its
		// output (`start-agent & wc -l < log`, an ssh ControlPersist master): what the shell
		// printed is its reading. Before 2026-12-07 this failed the witness with "WaitDelay
		// expired before I/O complete", and with it a probe that had a clean reading.
		err = nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("%q did not finish within %s", w.Command, timeout)
		}
		// `grep -c` prints 0 and exits 1 when nothing matches: a clean number with nothing on
		// stderr is the reading, whatever the exit status.
		var exit *exec.ExitError
		if errors.As(err, &exit) && ctx.Err() == nil && strings.TrimSpace(stderr.String()) == "" {
			if n, perr := stdout.count(); perr == nil {
				return n, nil
			}
		}
		msg := firstLine(stderr.String())
		if msg == "" {
			msg = firstLine(stdout.String())
		}
		if msg != "" {
			return 0, fmt.Errorf("%q failed: %v: %s", w.Command, err, msg)
		}
		return 0, fmt.Errorf("%q failed: %v", w.Command, err)
	}
	return stdout.count()
}

// maxWitnessOutput bounds what is kept of a witness's stdout and of its stderr.
const maxWitnessOutput = 64 << 10

// keepHead keeps the first max bytes written to it and counts the rest without keeping them.
type keepHead struct {
	max  int
	head []byte
	cut  bool
}

func (k *keepHead) Write(p []byte) (int, error) {
	n := len(p)
	if room := k.max - len(k.head); room < len(p) {
		k.cut = true
		p = p[:max(room, 0)]
	}
	k.head = append(k.head, p...)
	return n, nil
}

func (k *keepHead) String() string { return string(k.head) }

// count is ParseCount of what was kept; of output cut at the bound, the last field (which
// may be a number cut short: 123 of 123456) is not read.
func (k *keepHead) count() (int64, error) {
	if !k.cut {
		return ParseCount(string(k.head))
	}
	out := string(k.head)
	if i := strings.LastIndexAny(out, " \t\r\n\v\f"); i >= 0 {
		out = out[:i]
	} else {
		out = ""
	}
	if n, err := ParseCount(out); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("the witness printed no whole number in the first %d bytes of its output: %q", k.max, clip(strings.TrimSpace(string(k.head)), 80))
}

// ParseCount returns the first whitespace-separated whole number in out.
func ParseCount(out string) (int64, error) {
	for _, f := range strings.Fields(out) {
		if n, err := strconv.ParseInt(f, 10, 64); err == nil {
			return n, nil
		}
	}
	if strings.TrimSpace(out) == "" {
		return 0, errors.New("the witness printed nothing; it must print a number (e.g. `wc -l < effects.log`)")
	}
	return 0, fmt.Errorf("the witness printed no whole number: %q", clip(strings.TrimSpace(out), 80))
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return clip(s, 200)
}
