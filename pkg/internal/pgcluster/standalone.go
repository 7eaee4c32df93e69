//go:build unix

package pgcluster

import (
	"errors"
	"fmt"
	"sync"
)

// Standalone is a TB for a program that is not a test. Its Fatal, Fatalf and Skipf panic with a
// *Failure, which Catch turns back into an error; its Cleanup functions run at Close, the last
// registered first, as a test's do when it ends.
type Standalone struct {
	mu       sync.Mutex
	cleanups []func()
}

// Failure is why a function called through Catch could not do its work. Skip is true where a
// test would have been skipped (SKIP-REQUIRED: no server binaries).
type Failure struct {
	Msg  string
	Skip bool
}

func (f *Failure) Error() string { return "pgcluster: " + f.Msg }

// Helper does nothing: there is no test log to attribute lines in.
func (*Standalone) Helper() {}

// Fatal panics with a *Failure for Catch.
func (*Standalone) Fatal(args ...any) { panic(&Failure{Msg: fmt.Sprint(args...)}) }

// Fatalf panics with a *Failure for Catch.
func (*Standalone) Fatalf(format string, args ...any) {
	panic(&Failure{Msg: fmt.Sprintf(format, args...)})
}

// Skipf panics with a *Failure marked Skip for Catch.
func (*Standalone) Skipf(format string, args ...any) {
	panic(&Failure{Msg: fmt.Sprintf(format, args...), Skip: true})
}

// Cleanup registers f to run at Close.
func (s *Standalone) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

// Close runs the registered cleanups, the last first (clusters are killed, their directories
// removed). It may be called more than once.
func (s *Standalone) Close() {
	for {
		s.mu.Lock()
		if len(s.cleanups) == 0 {
			s.mu.Unlock()
			return
		}
		f := s.cleanups[len(s.cleanups)-1]
		s.cleanups = s.cleanups[:len(s.cleanups)-1]
		s.mu.Unlock()
		f()
	}
}

// Catch calls f, which calls this package's functions with a *Standalone, and returns the
// *Failure any of them stopped it with (nil when f returned). Other panics go on.
func Catch(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			var fl *Failure
			if e, ok := v.(error); ok && errors.As(e, &fl) {
				err = fl
				return
			}
			panic(v)
		}
	}()
	f()
	return nil
}
