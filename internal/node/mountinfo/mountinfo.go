package mountinfo

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Mount is one line of /proc/<pid>/mountinfo (proc(5)); octal escapes
// (\040 for a space) are decoded.
type Mount struct {
	// ID and Parent are the mount's id and its parent's.
	ID, Parent int
	// Root is the directory of the filesystem mounted at Point (not "/"
	// for a bind mount of a subdirectory, or a cgroup namespace's view).
	Root string
	// Point is where the mount is, in the reading process's root.
	Point string
	// FSType is the filesystem type, with a FUSE subtype appended as
	// the kernel prints it ("fuse.sshfs").
	FSType string
	// Source is the mount source: "server:/export" for NFS,
	// "//server/share" for CIFS, "user@host:/dir" for sshfs.
	Source string
	// Options are the per-superblock options ("rw,vers=4.2,addr=10.0.0.1").
	Options string
}

// maxMountinfoLine bounds one line: a path is at most PATH_MAX (4096)
// bytes, escaped up to four times over, and a line holds three of them
// and the options.
const maxMountinfoLine = 64 << 10

// Parse reads a mountinfo table. A malformed line is an error
// naming its number, so a format this parser does not know is refused
// rather than misread.
func Parse(r io.Reader) ([]Mount, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxMountinfoLine)
	var out []Mount
	for n := 1; sc.Scan(); n++ {
		if sc.Text() == "" {
			continue
		}
		m, err := parseMountLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("mountinfo line %d: %w", n, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return out, nil
}

// ParseLine parses one line of the table (without its newline).
func ParseLine(line string) (Mount, error) { return parseMountLine(line) }

// parseMountLine parses "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 -
// ext3 /dev/root rw,errors=continue": six fixed fields, optional fields
// up to a lone "-", then type, source and superblock options.
func parseMountLine(line string) (Mount, error) {
	f := strings.Split(line, " ")
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if len(f) < 7 || sep < 0 || len(f) != sep+4 {
		return Mount{}, fmt.Errorf("want 6 fields, optional fields, \"-\", then 3 fields; got %d fields", len(f))
	}
	var m Mount
	var err error
	if m.ID, err = strconv.Atoi(f[0]); err != nil {
		return Mount{}, fmt.Errorf("mount id %q: %w", f[0], err)
	}
	if m.Parent, err = strconv.Atoi(f[1]); err != nil {
		return Mount{}, fmt.Errorf("parent id %q: %w", f[1], err)
	}
	if m.Root, err = unescape(f[3]); err != nil {
		return Mount{}, fmt.Errorf("root: %w", err)
	}
	if m.Point, err = unescape(f[4]); err != nil {
		return Mount{}, fmt.Errorf("mount point: %w", err)
	}
	if !strings.HasPrefix(m.Point, "/") {
		return Mount{}, fmt.Errorf("mount point %q is not absolute", m.Point)
	}
	if m.FSType, err = unescape(f[sep+1]); err != nil {
		return Mount{}, fmt.Errorf("filesystem type: %w", err)
	}
	if m.FSType == "" {
		return Mount{}, errors.New("empty filesystem type")
	}
	if m.Source, err = unescape(f[sep+2]); err != nil {
		return Mount{}, fmt.Errorf("mount source: %w", err)
	}
	if m.Options, err = unescape(f[sep+3]); err != nil {
		return Mount{}, fmt.Errorf("superblock options: %w", err)
	}
	return m, nil
}

// unescape decodes the kernel's \ooo escapes (of space, tab, newline and
// backslash, but any byte is accepted).
func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if len(s)-i < 4 {
			return "", fmt.Errorf("%q: truncated escape at byte %d", s, i)
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", fmt.Errorf("%q: bad escape at byte %d", s, i)
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// Containing returns the mount that holds path: the one whose point is the
// longest prefix of path, component-wise. Where mounts are stacked on one
// point the last in the table is on top, and wins. path must be clean and
// absolute; nothing on the filesystem is touched, so a hung mount does
// not hang the lookup.
func Containing(mounts []Mount, path string) (Mount, bool) {
	best, found := Mount{}, false
	for _, m := range mounts {
		if !under(path, m.Point) {
			continue
		}
		if !found || len(m.Point) >= len(best.Point) {
			best, found = m, true
		}
	}
	return best, found
}

// under reports whether path is point or below it.
func under(path, point string) bool {
	if point == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == point || strings.HasPrefix(path, point+"/")
}

// SuperOptions are the per-superblock options as a list, where a cgroup v1
// mount names its controllers.
func (m Mount) SuperOptions() []string { return strings.Split(m.Options, ",") }
