package colltrace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ParseEnviron splits the contents of /proc/PID/environ (NUL-separated
// NAME=value entries) into a map. Entries without '=' are skipped; a later
// duplicate wins, as getenv's first match would not, but duplicates are
// rare enough not to matter for RANK.
func ParseEnviron(b []byte) map[string]string {
	env := map[string]string{}
	for kv := range bytes.SplitSeq(b, []byte{0}) {
		k, v, ok := bytes.Cut(kv, []byte{'='})
		if !ok || len(k) == 0 {
			continue
		}
		env[string(k)] = string(v)
	}
	return env
}

// RankFromEnv labels process pid from its environment: RANK when set (a
// global rank, torchrun and most launchers set it), else LOCAL_RANK, else
// the pid.
func RankFromEnv(pid int, env map[string]string) Rank {
	r := PIDRank(pid)
	r.Rank = envInt(env, "RANK")
	r.LocalRank = envInt(env, "LOCAL_RANK")
	switch {
	case r.Rank >= 0:
		r.Label = "rank " + strconv.Itoa(r.Rank)
	case r.LocalRank >= 0:
		r.Label = "local_rank " + strconv.Itoa(r.LocalRank)
	}
	return r
}

func envInt(env map[string]string, k string) int {
	n, err := strconv.Atoi(strings.TrimSpace(env[k]))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// ProcRank labels a running process from /proc/PID/environ under procRoot
// ("/proc" when empty). An unreadable environment (the process exited, or
// no permission) gives the pid label and the error.
func ProcRank(procRoot string, pid int) (Rank, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "environ"))
	if err != nil {
		return PIDRank(pid), fmt.Errorf("read environment of pid %d: %w", pid, err)
	}
	return RankFromEnv(pid, ParseEnviron(b)), nil
}

// ErrNotMapped means the process has no mapping of the library.
var ErrNotMapped = errors.New("library not mapped")

// LibFromMaps returns the path of the first file mapping in a
// /proc/PID/maps listing whose base name starts with prefix (e.g.
// "libnccl.so"). The path is as the process sees it, in its own mount
// namespace. A mapping of a file deleted since it was mapped is skipped:
// it cannot be opened by name.
func LibFromMaps(r io.Reader, prefix string) (string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		path, ok := mapsPath(sc.Text())
		if !ok || strings.HasSuffix(path, " (deleted)") {
			continue
		}
		if strings.HasPrefix(filepath.Base(path), prefix) {
			return path, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read maps: %w", err)
	}
	return "", fmt.Errorf("no mapping of %s*: %w", prefix, ErrNotMapped)
}

// mapsPath returns the pathname field of one maps line: everything after
// the fifth field, which may itself hold spaces.
func mapsPath(line string) (string, bool) {
	rest := line
	for range 5 {
		rest = strings.TrimLeft(rest, " ")
		i := strings.IndexByte(rest, ' ')
		if i < 0 {
			return "", false
		}
		rest = rest[i:]
	}
	p := strings.TrimLeft(rest, " ")
	if !strings.HasPrefix(p, "/") {
		return "", false
	}
	return p, true
}

// ProcLib finds the library (base name starting with prefix) process pid
// has mapped, and returns a path to it that works from this mount
// namespace: /proc/PID/root followed by the process's own path, which
// reaches the same file (and inode) even inside a container.
func ProcLib(procRoot string, pid int, prefix string) (string, error) {
	if procRoot == "" {
		procRoot = "/proc"
	}
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	f, err := os.Open(filepath.Join(dir, "maps"))
	if err != nil {
		return "", fmt.Errorf("find %s in pid %d: %w", prefix, pid, err)
	}
	defer f.Close()
	p, err := LibFromMaps(f, prefix)
	if err != nil {
		return "", fmt.Errorf("find %s in pid %d: %w", prefix, pid, err)
	}
	return filepath.Join(dir, "root", p), nil
}
