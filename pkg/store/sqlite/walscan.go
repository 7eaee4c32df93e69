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
	var order binary.ByteOrder
	switch binary.BigEndian.Uint32(h[0:4]) {
	case 0x377f0682:
		order = binary.LittleEndian
	case 0x377f0683:
		order = binary.BigEndian
	}
	pageSize := int(binary.BigEndian.Uint32(h[8:12]))
	salt := h[16:24]
	stored := [2]uint32{binary.BigEndian.Uint32(h[24:28]), binary.BigEndian.Uint32(h[28:32])}
	headerOK := order != nil && walSum(order, [2]uint32{}, h[:24]) == stored && pageSize >= 512 && pageSize <= 65536 && pageSize&(pageSize-1) == 0
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
