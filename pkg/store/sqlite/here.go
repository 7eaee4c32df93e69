package sqlite

import (
	"os"
	"sync"
)

// Closing any descriptor of a file drops every POSIX lock the process holds on that file,
// SQLite's included (SQLite's own connections to one file share their descriptors for that
// reason; "How To Corrupt An SQLite Database File", 2.2). A process holding a Store on a
// ledger and then opening and closing the file with descriptors of its own (a second Store's
// checks of the header and of write access, or a Check) lost its lock on the file, on which
// SQLite relies to know, across processes, that a connection still uses the ledger. So the
// Stores of this process register the files they have open (here), and nothing opens a
// descriptor of a registered file: aside skips what it would have checked, which the Store
// that has the file open checked when it opened it.

var here struct {
	mu    sync.Mutex
	files []*hereFile
}

type hereFile struct {
	fi os.FileInfo
	n  int
}

// aside runs fn, which opens and closes the file fi describes, unless a Store of this process
// has that file open or is opening it; then fn is skipped and skipped is true. The registry
// stays locked while fn runs, so no Store starts opening the file meanwhile.
func aside(fi os.FileInfo, fn func() error) (skipped bool, err error) {
	here.mu.Lock()
	defer here.mu.Unlock()
	for _, h := range here.files {
		if os.SameFile(h.fi, fi) {
			return true, nil
		}
	}
	return false, fn()
}

// hold registers the file at path as open in a Store of this process, before SQLite opens
// it; release undoes that once the Store's connections are closed. A file that cannot be
// looked at is not registered (opening it fails anyway).
func hold(path string) (release func()) {
	fi, err := os.Stat(path)
	if err != nil {
		return func() {}
	}
	here.mu.Lock()
	defer here.mu.Unlock()
	var h *hereFile
	for _, x := range here.files {
		if os.SameFile(x.fi, fi) {
			h = x
			break
		}
	}
	if h == nil {
		h = &hereFile{fi: fi}
		here.files = append(here.files, h)
	}
	h.n++
	var once sync.Once
	return func() {
		once.Do(func() {
			here.mu.Lock()
			defer here.mu.Unlock()
			if h.n--; h.n > 0 {
				return
			}
			for i, x := range here.files {
				if x == h {
					here.files = append(here.files[:i], here.files[i+1:]...)
					break
				}
			}
		})
	}
}
