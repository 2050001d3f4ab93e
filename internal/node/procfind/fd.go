package procfind

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Fdinfo is what the injectors need from /proc/PID/fdinfo/N.
type Fdinfo struct {
	// Pos is the file offset: for a file written front to back, the
	// bytes written so far.
	Pos int64
	// Flags are the open(2) flags the file was opened with.
	Flags int
}

// Writable reports whether the descriptor was opened for writing.
func (f Fdinfo) Writable() bool {
	acc := f.Flags & syscall.O_ACCMODE
	return acc == syscall.O_WRONLY || acc == syscall.O_RDWR
}

// ParseFdinfo parses the bytes of /proc/PID/fdinfo/N: "key:\tvalue"
// lines, of which pos (decimal) and flags (octal) are required.
func ParseFdinfo(b []byte) (Fdinfo, error) {
	var (
		fi               Fdinfo
		hasPos, hasFlags bool
	)
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch string(k) {
		case "pos":
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil || n < 0 {
				return Fdinfo{}, fmt.Errorf("pos %q is not a file offset", v)
			}
			fi.Pos, hasPos = n, true
		case "flags":
			n, err := strconv.ParseUint(string(v), 8, 32)
			if err != nil {
				return Fdinfo{}, fmt.Errorf("flags %q are not octal", v)
			}
			fi.Flags, hasFlags = int(n), true
		}
	}
	if !hasPos || !hasFlags {
		return Fdinfo{}, errors.New("no pos or no flags line")
	}
	return fi, nil
}

// OpenFile is one descriptor of a process open on a file.
type OpenFile struct {
	FD   int
	Path string
	Fdinfo
}

// WritersUnder lists pid's descriptors open for writing on files in dir
// or below it. dir must be an absolute, clean path as the kernel prints
// it (symlinks resolved), since /proc/PID/fd links are compared to it
// textually. Descriptors closed during the scan are left out; a process
// that is gone is os.ErrNotExist.
func WritersUnder(pid int, dir string) ([]OpenFile, error) {
	base := "/proc/" + strconv.Itoa(pid)
	ents, err := os.ReadDir(base + "/fd")
	if err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil, os.ErrNotExist
		}
		return nil, err
	}
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var out []OpenFile
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		link, err := os.Readlink(base + "/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(link, prefix) || !filepath.IsAbs(link) {
			continue
		}
		b, err := os.ReadFile(base + "/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		fi, err := ParseFdinfo(b)
		if err != nil {
			return nil, fmt.Errorf("%s/fdinfo/%d: %w", base, fd, err)
		}
		if fi.Writable() {
			out = append(out, OpenFile{FD: fd, Path: link, Fdinfo: fi})
		}
	}
	return out, nil
}
