package sqlite

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// checkMountedAlone refuses a ledger file that is a mount point of its own (a single file
// bind-mounted into a container: docker -v /srv/ledger.db:/data/ledger.db). SQLite keeps a
// ledger's write-ahead log and its index beside the path it opened (path-wal, path-shm), so
// they land outside the mount: every decision committed since the last checkpoint lives in a
// log that other names of the file never see (another process on the host, or the next
// container) and that goes with this container's filesystem. A duplicate there finds no
// receipt and runs again; two writers under two names each append to their own log and
// corrupt the file when they checkpoint. A /proc without mountinfo is not a refusal.
func checkMountedAlone(path string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	real := realPath(path)
	in := bufio.NewScanner(f)
	in.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for in.Scan() {
		// "36 35 98:0 /root /mount/point options ... - fstype source options": the fifth
		// field is the mount point, with space, tab, newline and backslash written in octal.
		fields := strings.Fields(in.Text())
		if len(fields) < 5 || unescapeMountPath(fields[4]) != real {
			continue
		}
		return &FileError{Path: path,
			Problem: fmt.Sprintf("is a file mounted on its own (a bind mount of the file, not of its directory): SQLite keeps the ledger's write-ahead log beside the path it opens (%s-wal), outside the mount, so the decisions in it would be lost with this filesystem and never seen by processes that use the file under another name", real),
			Advice:  "mount the directory that holds the ledger instead (docker -v /srv/effectfence:/data, not -v /srv/effectfence/ledger.db:/data/ledger.db), or share a PostgreSQL ledger (--ledger postgres://...); nothing was changed"}
	}
	return nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space, \134 for a backslash).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
