//go:build !linux

package fence

// nestedLiveness: only Linux shows a PID namespace below this one in /proc (nested_linux.go).
func nestedLiveness([]string, local) Liveness { return CannotTell }

// PIDHere: no PID namespace is seen from another one on this platform.
func PIDHere(string) (int, bool) { return 0, false }

// nestedCarrier: no PID namespace is seen from another one on this platform.
func nestedCarrier(string, string, local) (int, bool) { return 0, false }

// nestedFind: no PID namespace is seen from another one on this platform.
func nestedFind([]string, local) (int, bool) { return 0, false }
