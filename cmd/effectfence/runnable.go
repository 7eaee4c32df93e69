package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
)

// lookCommand finds the program of a command as exec.Cmd does (exec.LookPath) and, when it is
// a script, checks that the interpreter its #! line names can run too. The kernel runs a
// script by executing that interpreter; when it is missing (a virtual environment removed
// or rebuilt under a console script's absolute #! line, a shell that is not installed) the
// exec fails with "no such file or directory" although the script is there. LookPath alone
// passed such a command, so wrap opened (and created) its ledger and reported the failure at
// the agent's initialize instead of refusing it as a command that cannot run.
func lookCommand(name string) error {
	path, err := exec.LookPath(name)
	if err != nil {
		return err
	}
	if runtime.GOOS == "windows" {
		return nil // no #! lines
	}
	return checkInterpreter(path, 0)
}

// maxInterpreterDepth is how many scripts deep an interpreter is followed (a script whose
// interpreter is itself a script); Linux stops at a few levels, and past this one the exec
// is left to judge.
const maxInterpreterDepth = 4

// shebangBytes is how much of a script the kernel reads for its #! line (BINPRM_BUF_SIZE).
const shebangBytes = 256

// checkInterpreter reads the #! line of the file at path, if it has one, and checks the
// interpreter it names as the kernel finds it: as written, relative to the working directory
// (never looked up in PATH).
func checkInterpreter(path string, depth int) error {
	if depth >= maxInterpreterDepth {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil // not readable here: the exec decides, as before
	}
	buf := make([]byte, shebangBytes)
	n, _ := io.ReadFull(f, buf)
	_ = f.Close()
	buf = buf[:n]
	if !bytes.HasPrefix(buf, []byte("#!")) {
		return nil
	}
	line, _, ok := bytes.Cut(buf[2:], []byte("\n"))
	if !ok && n == shebangBytes {
		return nil // a line longer than the kernel reads: leave it to the exec
	}
	line = bytes.TrimLeft(line, " \t")
	if i := bytes.IndexAny(line, " \t\x00"); i >= 0 {
		line = line[:i]
	}
	interp := string(line)
	if interp == "" {
		return nil
	}
	look := interp
	if !strings.Contains(look, "/") {
		look = "./" + look // the kernel opens it relative to the working directory
	}
	if _, err := exec.LookPath(look); err != nil {
		return fmt.Errorf("its interpreter %q (the #! line of %s): %v", interp, path, unwrapExec(err))
	}
	return checkInterpreter(look, depth+1)
}
