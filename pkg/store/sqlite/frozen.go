package sqlite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
	"modernc.org/sqlite/vfs"
)

// A ledger in WAL mode is read beside its index (-shm), which SQLite makes, truncates and
// rebuilds from the log when no process has the ledger open: on a full disk (or a read-only
// file system) that fails, and a look at what is fenced failed with it. A read-only open
// there (Options.AtRest) reads the file and its log as they are, through a read-only VFS
// (modernc.org/sqlite/vfs) over frozenImage: the file's pages, each page the log's last
// committed frame holds read from the log instead, as SQLite's recovery of the log would
// apply them. Nothing is written, nothing is created beside the ledger, and the index, which
// walLost reads for the frames a log lost, is left as it was.

// frozenName is the name under which the VFS serves the image.
const frozenName = "ledger.db"

// ErrNotAtRest is returned, wrapped, by an AtRest open of a ledger that a process has open.
var ErrNotAtRest = errors.New("a process has the ledger open")

// ErrDiskFailsWrites is returned, wrapped, by an open for writing refused because a write to
// the disk under the ledger failed (Linux: copying the log into the file at the open, see
// syncLog). Nothing was changed; a look can still read the ledger at rest (AtRest).
var ErrDiskFailsWrites = errors.New("the disk fails writes")

// frozenImage is the ledger as SQLite would read it: the file with the committed frames of its
// log applied.
type frozenImage struct {
	db, wal  *os.File
	dbFi     os.FileInfo
	walFi    os.FileInfo // nil without a log
	pageSize int64
	size     int64
	frames   map[uint32]int64 // page number: offset in the log of the page its last committed frame holds
	nFrames  uint32           // committed frames of the log
	path     string
}

// openFrozen reads the ledger at path (absolute) as frozenImage, if no process has it open:
// the descriptor of the file it keeps holds a shared lock as a reader's (an open file
// description lock), so that no process that opens the ledger meanwhile can close it as the
// last one, which checkpoints the log into the file and deletes it (see stillFrozen).
func openFrozen(path string) (_ *frozenImage, err error) {
	img := &frozenImage{path: path}
	defer func() {
		if err != nil {
			img.close() // what it opened: the image returned is nil
		}
	}()
	if img.db, err = os.Open(path); err != nil {
		return nil, err
	}
	if !lockAlone(img.db, path) {
		return nil, fmt.Errorf("ledger %s: %w (its locks say so, or this system cannot tell: open file description locks are Linux's)", path, ErrNotAtRest)
	}
	if img.dbFi, err = img.db.Stat(); err != nil {
		return nil, err
	}
	head := make([]byte, 100)
	if _, err := img.db.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("ledger %s: reading its header: %w", path, err)
	}
	img.pageSize = int64(binary.BigEndian.Uint16(head[16:18]))
	if img.pageSize == 1 {
		img.pageSize = 65536
	}
	img.size = img.dbFi.Size()
	img.wal, err = os.Open(realPath(path) + "-wal")
	switch {
	case errors.Is(err, os.ErrNotExist):
		return img, nil
	case err != nil:
		return nil, err
	}
	if img.walFi, err = img.wal.Stat(); err != nil {
		return nil, err
	}
	n, _, headerOK, dbPages, err := walCommitted(img.wal, img.walFi.Size(), nil)
	if err != nil {
		return nil, fmt.Errorf("ledger %s: reading its write-ahead log: %w", path, err)
	}
	if !headerOK || n == 0 {
		return img, nil // no frame SQLite would apply
	}
	h := make([]byte, walHeaderSize)
	if _, err := img.wal.ReadAt(h, 0); err != nil {
		return nil, err
	}
	_, pageSize, _, _ := walHeaderOf(h)
	if int64(pageSize) != img.pageSize {
		return nil, fmt.Errorf("ledger %s: its write-ahead log's pages are %d bytes, the file's %d", path, pageSize, img.pageSize)
	}
	img.frames = map[uint32]int64{}
	img.nFrames = n
	fh := make([]byte, walFrameHeaderSize)
	for i := int64(0); i < int64(n); i++ {
		off := walHeaderSize + i*(walFrameHeaderSize+img.pageSize)
		if _, err := img.wal.ReadAt(fh, off); err != nil {
			return nil, err
		}
		img.frames[binary.BigEndian.Uint32(fh)] = off + walFrameHeaderSize
	}
	img.size = int64(dbPages) * img.pageSize
	return img, nil
}

// serveFrozen reads the ledger at path (absolute) as frozenImage (openFrozen) and serves it
// through a read-only VFS of its own, whose name a DSN takes (Options.vfs, dsn). Closing the
// VFS, then the image, ends both.
func serveFrozen(path string) (*frozenImage, string, *vfs.FS, error) {
	img, err := openFrozen(path)
	if err != nil {
		return nil, "", nil, err
	}
	name, fsys, err := vfs.New(frozenFS{img})
	if err != nil {
		img.close()
		return nil, "", nil, err
	}
	return img, name, fsys, nil
}

// readAt reads the image at off.
func (img *frozenImage) readAt(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		at := off + int64(n)
		if at >= img.size {
			return n, io.EOF
		}
		in := at % img.pageSize
		chunk := p[n:min(len(p), n+int(img.pageSize-in), n+int(img.size-at))]
		var err error
		if f, ok := img.frames[uint32(at/img.pageSize)+1]; ok {
			_, err = img.wal.ReadAt(chunk, f+in)
		} else {
			_, err = img.db.ReadAt(chunk, at)
		}
		if err != nil {
			return n, err
		}
		// The header's read and write versions: 1 (a rollback journal), so that SQLite reads
		// the image alone and looks for no log and no index beside it.
		for _, b := range []int64{18, 19} {
			if b >= at && b < at+int64(len(chunk)) {
				chunk[b-at] = 1
			}
		}
		n += len(chunk)
	}
	return n, nil
}

// stillFrozen says what changed since openFrozen read the ledger ("" when nothing did): a
// process that opened it, or a file or log that is not what was read.
func (img *frozenImage) stillFrozen() string {
	if !lockAlone(img.db, img.path) {
		return "a process opened the ledger while it was read"
	}
	same := func(f *os.File, was os.FileInfo) bool {
		now, err := f.Stat()
		return err == nil && now.Size() == was.Size() && now.ModTime().Equal(was.ModTime())
	}
	fi, err := os.Stat(img.path)
	if err != nil || !os.SameFile(fi, img.dbFi) || !same(img.db, img.dbFi) {
		return "the ledger file changed while it was read"
	}
	if img.wal != nil && !same(img.wal, img.walFi) {
		return "the ledger's write-ahead log changed while it was read"
	}
	if _, err := os.Lstat(realPath(img.path) + "-wal"); img.wal == nil && !errors.Is(err, os.ErrNotExist) {
		return "a write-ahead log was made beside the ledger while it was read"
	}
	return ""
}

func (img *frozenImage) close() {
	if img.db != nil {
		img.db.Close()
	}
	if img.wal != nil {
		img.wal.Close()
	}
}

// frozenFS serves the image as frozenName, to modernc.org/sqlite/vfs.
type frozenFS struct{ img *frozenImage }

func (f frozenFS) Open(name string) (fs.File, error) {
	if name != frozenName {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &frozenFile{img: f.img}, nil
}

type frozenFile struct {
	img *frozenImage
	off int64
}

func (f *frozenFile) Stat() (fs.FileInfo, error) { return frozenInfo{f.img}, nil }
func (f *frozenFile) Close() error               { return nil }

func (f *frozenFile) Read(p []byte) (int, error) {
	n, err := f.img.readAt(p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *frozenFile) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += f.off
	case io.SeekEnd:
		off += f.img.size
	}
	if off < 0 {
		return f.off, errors.New("seek before the start")
	}
	f.off = off
	return off, nil
}

type frozenInfo struct{ img *frozenImage }

func (i frozenInfo) Name() string       { return frozenName }
func (i frozenInfo) Size() int64        { return i.img.size }
func (i frozenInfo) Mode() fs.FileMode  { return 0o400 }
func (i frozenInfo) ModTime() time.Time { return i.img.dbFi.ModTime() }
func (i frozenInfo) IsDir() bool        { return false }
func (i frozenInfo) Sys() any           { return nil }

// Unwritable names what keeps SQLite from writing beside the ledger at path (a full disk, a
// read-only file system, a used-up quota, an immutable file), "" when nothing does or it
// cannot be told: where a look at the ledger is better read at rest (Options.AtRest), as
// SQLite's own open would fail, and could leave an empty log and a torn index behind.
func Unwritable(path string) string { return diskTrouble(path, false) }

// OpenUnwritable names what kept an open of the ledger at path, refused with err, from writing
// beside it (a full disk, a used-up quota, a read-only file system), "" for any other error or
// where it cannot be told. Unwritable's probe writes one byte, which a disk with a few pages
// left takes, where SQLite's open, which makes a 32 KiB index and a log beside the ledger,
// finds no room (SQLITE_FULL, or SQLITE_IOERR_SHMSIZE growing the index): a look at the ledger
// is then better read at rest too.
func OpenUnwritable(path string, err error) string {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return ""
	}
	if se.Code() == sqlite3.SQLITE_IOERR_SHMSIZE { // no room to grow the index: by then taken back
		return diskTrouble(path, true)
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_FULL:
		return diskTrouble(path, true)
	case sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY:
		return diskTrouble(path, false)
	}
	return ""
}
