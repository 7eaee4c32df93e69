//go:build !unix

package scan

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
