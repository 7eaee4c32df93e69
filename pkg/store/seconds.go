package store

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Bounds of the lease and of the result TTL, in seconds. Below a second a lease lapses
// between two heartbeats of a healthy holder and every call ends fenced; a lease above 30 days
// keeps a crashed holder's intent in flight for a month; results kept longer than a year are
// almost certainly a typo (and a ledger that never shrinks).
const (
	MinSeconds       = 1
	MaxLeaseSeconds  = 30 * 24 * 3600
	MaxResultSeconds = 366 * 24 * 3600
)

// LeaseSeconds checks a lease given in seconds (a flag or EFFECTFENCE_LEASE_SECS, named by
// what) and returns it as a duration.
func LeaseSeconds(what string, v float64) (time.Duration, error) {
	return seconds(what, v, MaxLeaseSeconds, "30 days")
}

// ResultSeconds checks a result TTL given in seconds and returns it as a duration.
func ResultSeconds(what string, v float64) (time.Duration, error) {
	return seconds(what, v, MaxResultSeconds, "366 days")
}

func seconds(what string, v float64, max float64, maxText string) (time.Duration, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < MinSeconds || v > max {
		// 'g' with the shortest precision writes 2592001 as 2.592001e+06; 'f' as given.
		return 0, fmt.Errorf("%s=%s: want a number of seconds from %d to %.0f (%s)", what, strconv.FormatFloat(v, 'f', -1, 64), MinSeconds, max, maxText)
	}
	return time.Duration(v * float64(time.Second)), nil
}
