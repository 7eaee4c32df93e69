package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// A ledger view (ls, export, verify, stats) reads the ledger in one read transaction and
// writes its report as it reads. Written straight to a pipe, a reader that stops reading (a
// pager left open, a stopped process) would stop the view inside that transaction: a SQLite
// ledger's write-ahead log cannot be checkpointed past it and grows with every call the
// fleet makes; a PostgreSQL ledger keeps a connection and a snapshot that holds back vacuum.
// spillWriter stands between the view and such a stream: a reader that keeps reading is
// waited for, one that takes nothing for spillAfter has the rest of the report kept in a
// private temporary file until it reads it, so the view ends and lets go of the ledger.

const (
	// spillMemory is how much of the report waits in memory for a slow reader.
	spillMemory = 1 << 20
	// spillAfter is how long a writer whose memory is full waits for the reader to take some
	// of it before the rest of the report goes to a temporary file.
	spillAfter = 500 * time.Millisecond
)

// spillWriter writes to dst from a goroutine of its own, in the order written. Close waits
// until everything reached dst and returns dst's first error.
type spillWriter struct {
	dst   io.Writer
	dir   string        // where the temporary file is made ("": os.TempDir())
	after time.Duration // spillAfter; longer in a test whose reader a loaded machine may stall

	mu    sync.Mutex
	cond  *sync.Cond
	queue []segment // what dst has not had yet, oldest first
	held  int       // bytes of queue kept in memory
	file  *os.File  // the temporary file, once one is made
	size  int64     // bytes written to file
	// spilled: the reader paused: what follows goes to file (while it can be written).
	spilled  bool
	fileErr  error // making or writing the file failed: wait for the reader instead
	removeAt string
	err      error // dst's first error: nothing more is written
	closed   bool
	done     chan struct{}
}

// segment is a piece of the report: bytes in memory, or a range of the temporary file.
type segment struct {
	mem      []byte
	off, len int64
}

func newSpillWriter(dst io.Writer, dir string) *spillWriter {
	s := &spillWriter{dst: dst, dir: dir, after: spillAfter, done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.drain()
	return s
}

// needsSpill says whether w is a stream a reader can hold up (a pipe, a terminal, a socket):
// a regular file takes what is written without waiting for anyone.
func needsSpill(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && !fi.Mode().IsRegular()
}

func (s *spillWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	if !s.spilled && s.held+len(p) > spillMemory && s.held > 0 {
		// Memory is full: wait for the reader to take some, for at most spillAfter.
		deadline := time.Now().Add(s.after)
		timer := time.AfterFunc(s.after, func() {
			s.mu.Lock()
			s.cond.Broadcast()
			s.mu.Unlock()
		})
		for s.err == nil && s.held+len(p) > spillMemory && s.held > 0 && time.Now().Before(deadline) {
			s.cond.Wait()
		}
		timer.Stop()
		if s.err != nil {
			return 0, s.err
		}
		if s.held+len(p) > spillMemory && s.held > 0 {
			s.spilled = true
		}
	}
	if s.spilled && s.fileErr == nil {
		if err := s.toFile(p); err == nil {
			return len(p), nil
		}
		// No room for a temporary file: the view waits for its reader, as it would without one.
	}
	for s.err == nil && s.held+len(p) > spillMemory && s.held > 0 {
		s.cond.Wait()
	}
	if s.err != nil {
		return 0, s.err
	}
	s.queue = append(s.queue, segment{mem: append([]byte(nil), p...)})
	s.held += len(p)
	s.cond.Broadcast()
	return len(p), nil
}

// toFile appends p to the temporary file, making it first. Called with s.mu held; the drain
// reads only ranges already queued, so the write does not race with it.
func (s *spillWriter) toFile(p []byte) error {
	if s.file == nil {
		f, err := os.CreateTemp(s.dir, "effectfence-report-*") // 0600: it holds what the ledger holds
		if err != nil {
			s.fileErr = err
			return err
		}
		// Gone from the directory at once where the system allows it (a killed process leaves
		// nothing behind); elsewhere removed by Close.
		if os.Remove(f.Name()) != nil {
			s.removeAt = f.Name()
		}
		s.file = f
	}
	if _, err := s.file.WriteAt(p, s.size); err != nil {
		s.fileErr = err
		return err
	}
	if n := len(s.queue); n > 0 && s.queue[n-1].mem == nil && s.queue[n-1].off+s.queue[n-1].len == s.size {
		s.queue[n-1].len += int64(len(p))
	} else {
		s.queue = append(s.queue, segment{off: s.size, len: int64(len(p))})
	}
	s.size += int64(len(p))
	s.cond.Broadcast()
	return nil
}

// drain writes the queue to dst until Close, or dst's first error.
func (s *spillWriter) drain() {
	defer close(s.done)
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.closed {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		seg := s.queue[0]
		s.queue[0] = segment{} // the bytes are not kept by the queue's array once written
		s.queue = s.queue[1:]
		file := s.file
		s.mu.Unlock()

		var err error
		if seg.mem != nil {
			_, err = s.dst.Write(seg.mem)
		} else {
			var n int64
			n, err = io.Copy(s.dst, io.NewSectionReader(file, seg.off, seg.len))
			if err == nil && n < seg.len {
				err = io.ErrUnexpectedEOF
			}
		}

		s.mu.Lock()
		s.held -= len(seg.mem)
		if err != nil {
			s.err = err
			s.queue = nil
		}
		s.cond.Broadcast()
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Close waits until dst has had everything written (or failed), removes the temporary file
// and returns dst's first error.
func (s *spillWriter) Close() error {
	s.mu.Lock()
	s.closed = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
	var left error
	if s.file != nil {
		s.file.Close() // read to its end or abandoned: nothing is lost if closing it fails
		if s.removeAt != "" {
			if err := os.Remove(s.removeAt); err != nil {
				left = fmt.Errorf("the report's temporary copy %s could not be removed (it holds what the report shows; remove it): %w", s.removeAt, err)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.err, left)
}
