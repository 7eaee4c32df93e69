// Command mcptestserver is mcptest's server as a program of its own, for tests whose claim is
// about the process in front of it: built without the race detector, it costs a fraction of
// the race-built test binary re-executed (mcptest.MaybeServe), which the detector would watch
// to no purpose. It reads the same environment (mcptest.EnvEffects, EnvMode, EnvHTTP) and
// ignores its arguments.
package main

import (
	"os"

	"github.com/effectfence/effectfence/pkg/internal/mcptest"
)

func main() { os.Exit(mcptest.Serve()) }
