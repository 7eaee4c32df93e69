package sqlite

import (
	"encoding/binary"
	"fmt"
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

// walDamageIn returns what is wrong with the log bytes b, or "" for a sound log, one that
// ends in a torn write, or one that holds no frames.
func walDamageIn(b []byte) string {
	if len(b) < walHeaderSize {
		return ""
	}
	var order binary.ByteOrder
	switch binary.BigEndian.Uint32(b[0:4]) {
	case 0x377f0682:
		order = binary.LittleEndian
	case 0x377f0683:
		order = binary.BigEndian
	}
	pageSize := int(binary.BigEndian.Uint32(b[8:12]))
	salt := b[16:24]
	stored := [2]uint32{binary.BigEndian.Uint32(b[24:28]), binary.BigEndian.Uint32(b[28:32])}
	headerOK := order != nil && walSum(order, [2]uint32{}, b[:24]) == stored && pageSize >= 512 && pageSize <= 65536 && pageSize&(pageSize-1) == 0
	// frameOK reports whether the frame at off verifies when run on from the checksum s.
	frameOK := func(order binary.ByteOrder, off, pageSize int, s [2]uint32, salt []byte) bool {
		if off+walFrameHeaderSize+pageSize > len(b) || binary.BigEndian.Uint32(b[off:]) == 0 || string(b[off+8:off+16]) != string(salt) {
			return false
		}
		s = walSum(order, s, b[off:off+8])
		s = walSum(order, s, b[off+walFrameHeaderSize:off+walFrameHeaderSize+pageSize])
		return s == [2]uint32{binary.BigEndian.Uint32(b[off+16:]), binary.BigEndian.Uint32(b[off+20:])}
	}
	if !headerOK {
		// SQLite ignores the whole log. Its first frame still verifies against the checksum
		// the header stores when only the header's other bytes (its salt, say) were damaged.
		if len(b) < walHeaderSize+walFrameHeaderSize {
			return ""
		}
		own := b[walHeaderSize+8 : walHeaderSize+16]
		for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
			for ps := 512; ps <= 65536; ps *= 2 {
				if frameOK(o, walHeaderSize, ps, stored, own) {
					return "has a write-ahead log whose header is damaged (its first frame verifies): SQLite ignores the whole log, and the decisions committed in it"
				}
			}
		}
		return ""
	}
	frameSize := walFrameHeaderSize + pageSize
	s := stored
	i, off := 0, walHeaderSize
	for ; frameOK(order, off, pageSize, s, salt); i, off = i+1, off+frameSize {
		s = [2]uint32{binary.BigEndian.Uint32(b[off+16:]), binary.BigEndian.Uint32(b[off+20:])}
	}
	bad := i
	for j, o := i+1, off+frameSize; o+frameSize <= len(b); j, o = j+1, o+frameSize {
		prev := [2]uint32{binary.BigEndian.Uint32(b[o-frameSize+16:]), binary.BigEndian.Uint32(b[o-frameSize+20:])}
		if binary.BigEndian.Uint32(b[o+4:]) != 0 && frameOK(order, o, pageSize, prev, salt) {
			return fmt.Sprintf("is damaged at frame %d of its write-ahead log, and a transaction committed after it (frame %d) is whole: SQLite ignores the log from frame %d on, and the decisions committed there", bad, j, bad)
		}
	}
	return ""
}

// walDamage reads the log beside the ledger at path and returns what is wrong with it (see
// walDamageIn), or "". A log that another process is writing while it is read can look
// damaged for a moment, so damage is read again for up to 200 ms before it is believed.
func walDamage(path string) (string, error) {
	for try := 0; ; try++ {
		b, err := os.ReadFile(path + "-wal")
		if os.IsNotExist(err) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
		what := walDamageIn(b)
		if what == "" || try == 20 {
			return what, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}
