package sqlite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// A write-ahead log is a 32-byte header and frames of a 24-byte header and one page each. Each
// frame carries the log's salt and a checksum that runs on from the frame before it (from the
// header's for the first frame). SQLite applies the frames up to the last commit frame before
// the first one that fails its checksum or has another salt, and takes the rest for a torn
// write: a flipped byte in a frame silently drops every transaction committed at or after it,
// and a damaged header the whole log. Those transactions were synced (synchronous=FULL), so the
// decisions in them are receipts the fence answered with; without them their duplicates run
// again. walDamage tells that damage from a torn tail by what follows the first bad frame: a
// later commit frame that verifies against the checksum its predecessor carries, with the
// log's salt, was written after the bad frame was whole.
const (
	walHeaderSize      = 32
	walFrameHeaderSize = 24
)

// walSum is SQLite's log checksum of b (a multiple of 8 bytes), run on from s.
func walSum(order binary.ByteOrder, s [2]uint32, b []byte) [2]uint32 {
	for i := 0; i+8 <= len(b); i += 8 {
		s[0] += order.Uint32(b[i:]) + s[1]
		s[1] += order.Uint32(b[i+4:]) + s[0]
	}
	return s
}

// walHeaderOf reads the header h of a log (walHeaderSize bytes): the byte order of its
// checksums, its page size, its own checksum (from which the frames' run on), and whether
// SQLite would read it (a known magic number, the checksum right, a page size it allows).
func walHeaderOf(h []byte) (order binary.ByteOrder, pageSize int, sum [2]uint32, ok bool) {
	switch binary.BigEndian.Uint32(h[0:4]) {
	case 0x377f0682:
		order = binary.LittleEndian
	case 0x377f0683:
		order = binary.BigEndian
	}
	pageSize = int(binary.BigEndian.Uint32(h[8:12]))
	sum = [2]uint32{binary.BigEndian.Uint32(h[24:28]), binary.BigEndian.Uint32(h[28:32])}
	ok = order != nil && walSum(order, [2]uint32{}, h[:24]) == sum && pageSize >= 512 && pageSize <= 65536 && pageSize&(pageSize-1) == 0
	return order, pageSize, sum, ok
}

// walDamageIn returns what is wrong with the log of size bytes that r reads, or "" for a sound
// log, one that ends in a torn write, or one that holds no frames. It reads one frame at a
// time: a log can be far larger than the ledger (a reader holding a snapshot keeps SQLite from
// checkpointing it), and every open of a ledger reads it.
func walDamageIn(r io.ReaderAt, size int64) (string, error) {
	if size < walHeaderSize {
		return "", nil
	}
	h := make([]byte, walHeaderSize)
	if _, err := r.ReadAt(h, 0); err != nil {
		return "", err
	}
	order, pageSize, stored, headerOK := walHeaderOf(h)
	salt := h[16:24]
	var buf []byte
	// frame reads the frame at off of a log of pages of pageSize into buf, or returns nil
	// when the log ends before it does.
	frame := func(off int64, pageSize int) ([]byte, error) {
		n := walFrameHeaderSize + pageSize
		if off+int64(n) > size {
			return nil, nil
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		f := buf[:n]
		if _, err := r.ReadAt(f, off); err != nil {
			if errors.Is(err, io.EOF) { // the file shrank meanwhile (a checkpoint truncated it)
				return nil, nil
			}
			return nil, err
		}
		return f, nil
	}
	// frameOK reports whether frame f verifies when run on from the checksum s.
	frameOK := func(order binary.ByteOrder, f []byte, s [2]uint32, salt []byte) bool {
		if f == nil || binary.BigEndian.Uint32(f) == 0 || string(f[8:16]) != string(salt) {
			return false
		}
		s = walSum(order, s, f[:8])
		s = walSum(order, s, f[walFrameHeaderSize:])
		return s == [2]uint32{binary.BigEndian.Uint32(f[16:]), binary.BigEndian.Uint32(f[20:])}
	}
	if !headerOK {
		// SQLite ignores the whole log. Its first frame still verifies against the checksum
		// the header stores when only the header's other bytes (its salt, say) were damaged.
		for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			for ps := 512; ps <= 65536; ps *= 2 {
				f, err := frame(walHeaderSize, ps)
				if err != nil {
					return "", err
				}
				if f != nil && frameOK(o, f, stored, f[8:16]) {
					return "has a write-ahead log whose header is damaged (its first frame verifies): SQLite ignores the whole log, and the decisions committed in it", nil
				}
			}
		}
		return "", nil
	}
	frameSize := int64(walFrameHeaderSize + pageSize)
	s := stored
	i, off := 0, int64(walHeaderSize)
	for ; ; i, off = i+1, off+frameSize {
		f, err := frame(off, pageSize)
		if err != nil {
			return "", err
		}
		if !frameOK(order, f, s, salt) {
			break
		}
		s = [2]uint32{binary.BigEndian.Uint32(f[16:]), binary.BigEndian.Uint32(f[20:])}
	}
	bad := i
	// Each later frame is checked against the checksum its predecessor carries (read first).
	var prev [2]uint32
	if f, err := frame(off, pageSize); err != nil {
		return "", err
	} else if f == nil {
		return "", nil
	} else {
		prev = [2]uint32{binary.BigEndian.Uint32(f[16:]), binary.BigEndian.Uint32(f[20:])}
	}
	// The first commit frame that verifies after the bad frame may end the very transaction
	// the bad frame is in, and that transaction may be the last one, whose fsync never
	// returned: a power cut during its commit leaves whichever of its pages the kernel had
	// written back, in any order, and a page that never reached the disk reads as a hole.
	// Nobody was told it committed, and SQLite drops it, as it is built to. Every earlier
	// transaction was synced before the next one began (synchronous=FULL, one writer at a
	// time), so only a commit frame after that one (a transaction begun once the damaged one
	// had committed) shows damage to what was acknowledged. (Damage inside the last
	// transaction alone cannot be told from such a power cut.)
	ended := -1 // the first commit frame after the bad frame that verifies
	for j, o := i+1, off+frameSize; ; j, o = j+1, o+frameSize {
		f, err := frame(o, pageSize)
		if err != nil {
			return "", err
		}
		if f == nil {
			return "", nil
		}
		if binary.BigEndian.Uint32(f[4:]) != 0 && frameOK(order, f, prev, salt) {
			if ended >= 0 {
				return fmt.Sprintf("is damaged at frame %d of its write-ahead log, and transactions committed after it (frames %d and %d) are whole: SQLite ignores the log from frame %d on, and the decisions committed there", bad, ended, j, bad), nil
			}
			ended = j
		}
		prev = [2]uint32{binary.BigEndian.Uint32(f[16:]), binary.BigEndian.Uint32(f[20:])}
	}
}

// walDamage reads the log beside the ledger at path and returns what is wrong with it (see
// walDamageIn), or "". A log that another process is writing while it is read can look
// damaged for a moment, so damage is read again for up to 200 ms before it is believed.
func walDamage(path string) (string, error) {
	for try := 0; ; try++ {
		what, err := walDamageOf(path + "-wal")
		if err != nil || what == "" || try == 20 {
			return what, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// walDamageOf is walDamageIn of the log file at path ("" when there is none).
func walDamageOf(path string) (string, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	return walDamageIn(f, fi.Size())
}

// The index beside a ledger (its -shm file) begins with a header that SQLite writes, in this
// machine's byte order, after each transaction it commits to the log has been synced: the
// number of log frames committed (mxFrame) and the log's salt, and, after it, how many of
// those frames a checkpoint has copied into the file (nBackfill). A process killed (or a
// machine that went down) leaves it beside the log, and the next process to open the ledger
// rebuilds it from the log. Frames it counts past nBackfill hold the latest decisions, which
// are in the log only: a log removed, emptied, cut short or damaged since (`rm
// ledger.db-wal`, the usual advice for a "locked" SQLite database) took them with it, and
// SQLite, finding less log than that, opens the file without them and rebuilds the index, so
// every call they recorded is answered as new. walLost compares the two before SQLite does.
const (
	shmVersion        = 3007000 // WalIndexHdr.iVersion
	shmHeaderSize     = 48      // one copy of WalIndexHdr
	shmCheckpointInfo = 2 * shmHeaderSize
	shmReadSize       = shmCheckpointInfo + 4 // both copies and WalCkptInfo.nBackfill
)

// shmHeader is what walLost reads from an index: ok is false when the index holds no
// header SQLite would trust (none yet, torn between its two copies, or another layout).
type shmHeader struct {
	ok        bool
	committed uint32 // mxFrame
	copied    uint32 // nBackfill
	salt      [8]byte
}

// readShmHeader reads the header of the index at path. A missing or short index has none, and
// so has one this user may not read (another user's): SQLite, which must map it, answers for it.
func readShmHeader(path string) (shmHeader, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) || os.IsPermission(err) {
		return shmHeader{}, nil
	}
	if err != nil {
		return shmHeader{}, err
	}
	defer f.Close()
	b := make([]byte, shmReadSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return shmHeader{}, nil
		}
		return shmHeader{}, err
	}
	h := b[:shmHeaderSize]
	order := binary.NativeEndian
	if string(h) != string(b[shmHeaderSize:2*shmHeaderSize]) || order.Uint32(h[0:]) != shmVersion || h[12] != 1 {
		return shmHeader{}, nil
	}
	// Its checksum runs over the 40 bytes before it, read as words in this machine's order.
	var s [2]uint32
	for i := 0; i < 40; i += 8 {
		s[0] += order.Uint32(h[i:]) + s[1]
		s[1] += order.Uint32(h[i+4:]) + s[0]
	}
	if s != [2]uint32{order.Uint32(h[40:]), order.Uint32(h[44:])} {
		return shmHeader{}, nil
	}
	sh := shmHeader{ok: true, committed: order.Uint32(h[16:]), copied: order.Uint32(b[shmCheckpointInfo:])}
	copy(sh.salt[:], h[32:40])
	return sh, nil
}

// walCommitted returns how many frames of the log of size bytes that r reads SQLite would
// apply (up to its last commit frame before the first that does not verify) and the salt its
// header carries; headerOK is false when there is no header SQLite would read. With pages
// set, it also gives pages the page number of each frame it would apply and the database's
// size in pages after the last commit (0 when there is none).
func walCommitted(r io.ReaderAt, size int64, pages map[uint32]bool) (frames uint32, salt [8]byte, headerOK bool, dbPages uint32, err error) {
	if size < walHeaderSize {
		return 0, salt, false, 0, nil
	}
	h := make([]byte, walHeaderSize)
	if _, err := r.ReadAt(h, 0); err != nil {
		return 0, salt, false, 0, err
	}
	copy(salt[:], h[16:24])
	order, pageSize, s, ok := walHeaderOf(h)
	if !ok {
		return 0, salt, false, 0, nil
	}
	f := make([]byte, walFrameHeaderSize+pageSize)
	var txPages []uint32 // the pages of the transaction being read, until its commit frame
	for i, off := uint32(1), int64(walHeaderSize); off+int64(len(f)) <= size; i, off = i+1, off+int64(len(f)) {
		if _, err := r.ReadAt(f, off); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return 0, salt, true, 0, err
		}
		if binary.BigEndian.Uint32(f) == 0 || string(f[8:16]) != string(salt[:]) {
			break
		}
		s = walSum(order, s, f[:8])
		s = walSum(order, s, f[walFrameHeaderSize:])
		if s != [2]uint32{binary.BigEndian.Uint32(f[16:]), binary.BigEndian.Uint32(f[20:])} {
			break
		}
		if pages != nil {
			txPages = append(txPages, binary.BigEndian.Uint32(f))
		}
		if n := binary.BigEndian.Uint32(f[4:]); n != 0 {
			frames, dbPages = i, n
			for _, p := range txPages {
				pages[p] = true
			}
			txPages = txPages[:0]
		}
	}
	return frames, salt, true, dbPages, nil
}

// walLostOnce is one look of walLost: the index first, then the log, which SQLite writes
// before the index.
func walLostOnce(real string) (problem string, err error) {
	sh, err := readShmHeader(real + "-shm")
	if err != nil || !sh.ok || sh.committed <= sh.copied {
		return "", err
	}
	log := real + "-wal"
	f, err := os.Open(log)
	switch {
	case os.IsNotExist(err):
		return fmt.Sprintf("has no write-ahead log beside it (%s), but its index (%s-shm) counts %d frames of that log committed and not yet copied into the file: the log was removed after the process using it stopped (killed, or its machine went down), and the latest decisions were in it", log, real, sh.committed-sh.copied), nil
	case err != nil:
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	n, salt, headerOK, _, err := walCommitted(f, fi.Size(), nil)
	if err != nil {
		return "", err
	}
	if headerOK && salt != sh.salt {
		return "", nil // the log was begun afresh after the index was last written: it is not the log the index counts
	}
	if !headerOK && fi.Size() >= walHeaderSize && salt != sh.salt {
		return "", nil // a header of another log (walDamage judges a damaged one)
	}
	if n >= sh.committed {
		return "", nil
	}
	return fmt.Sprintf("has a write-ahead log (%s, %d bytes) that holds %d committed frames, but its index (%s-shm) counts %d, %d of them not yet copied into the file: the log was emptied, cut short or damaged after the process using it stopped (killed, or its machine went down), and the latest decisions were in the frames it lost", log, fi.Size(), n, real, sh.committed, sh.committed-max(sh.copied, n)), nil
}

// walLost reports a ledger file at path (resolved: SQLite keeps its log and index beside the
// file a link leads to) whose log lost frames its index counts as committed and not copied
// into the file (see shmHeader), with the way out; "" when it did not. A log and index that
// processes are writing while they are read can disagree for a moment, so a loss is looked
// for again for up to 200 ms before it is believed.
func walLost(path string) (problem, advice string, err error) {
	real := realPath(path)
	for try := 0; ; try++ {
		problem, err = walLostOnce(real)
		if err != nil || problem == "" {
			return "", "", err
		}
		if try == 20 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return problem + "; SQLite would open the file without them and rebuild the index: a call they recorded would run again, or its outcome be lost",
		fmt.Sprintf("stop every effectfence process that uses the ledger and put the whole log back at %[1]s-wal (from a copy or wherever it was moved; its next open applies it and keeps every decision); if it is lost for good, so are the decisions in it: to use the file without them, remove the index (rm %[1]s-shm), and check in the real systems every call made through this ledger since its last checkpoint before it runs again; nothing was changed", real), nil
}
