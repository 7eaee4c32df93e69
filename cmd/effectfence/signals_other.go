//go:build !unix

package main

import "os"

// statsSignals: this platform has no user signal; counters are logged at exit only.
var statsSignals []os.Signal
