package numa

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/bits"
	"os"
	"strconv"
	"strings"
)

// Mapping is one line of /proc/PID/numa_maps: one memory mapping of the
// process with its memory policy and where its resident pages are.
type Mapping struct {
	// Start is the mapping's start address.
	Start uint64 `json:"start"`
	// Policy is the mapping's memory policy as the kernel prints it:
	// "default", "bind:0", "interleave:0-1", "prefer:1", "local",
	// "weighted interleave:0-1", with "=static" or "=relative" flags.
	Policy string `json:"policy"`
	// File is the mapped file's path; empty for anonymous memory.
	File string `json:"file,omitempty"`
	// Heap and Stack mark the process's initial heap and its stack.
	Heap  bool `json:"heap,omitempty"`
	Stack bool `json:"stack,omitempty"`
	// Huge marks a hugetlbfs mapping.
	Huge bool `json:"huge,omitempty"`
	// Pages counts the mapping's resident pages per node.
	Pages map[int]uint64 `json:"pages,omitempty"`
	// PageSize is the size of those pages in bytes (kernelpagesize_kB);
	// zero when the mapping has no resident page.
	PageSize uint64 `json:"page_size,omitempty"`
}

// Bytes returns the mapping's resident bytes per node.
func (m Mapping) Bytes() map[int]uint64 {
	out := make(map[int]uint64, len(m.Pages))
	for n, p := range m.Pages {
		out[n] = p * m.PageSize // bounded by ParseNUMAMaps
	}
	return out
}

// Placement is where a process's resident memory is: bytes per node,
// summed over its mappings.
type Placement struct {
	Bytes map[int]uint64 `json:"bytes"`
}

// Total returns the resident bytes on all nodes.
func (p Placement) Total() uint64 {
	var t uint64
	for _, b := range p.Bytes {
		t += b
	}
	return t
}

// RemoteRatio returns the share of the resident bytes that are not on the
// local node; 0 when nothing is resident.
func (p Placement) RemoteRatio(local int) float64 {
	t := p.Total()
	if t == 0 {
		return 0
	}
	return float64(t-p.Bytes[local]) / float64(t)
}

// Sum adds up mappings into a Placement.
func Sum(ms []Mapping) Placement {
	p := Placement{Bytes: map[int]uint64{}}
	for _, m := range ms {
		for n, b := range m.Bytes() {
			p.Bytes[n] += b
		}
	}
	return p
}

// maxNUMAMapsLine bounds one line: an address, a policy, a path (at most
// PATH_MAX) and a few dozen counters.
const maxNUMAMapsLine = 64 << 10

// ParseNUMAMaps reads the text of /proc/PID/numa_maps.
//
// A line is "START POLICY[ file=PATH| heap| stack][ huge] KEY=VALUE…", and
// both the policy ("weighted interleave:0-1") and the path may hold
// spaces, so the counters are taken from the end of the line, back to the
// first token that is not one; what precedes them is split at " file="
// (or a trailing heap or stack). A path that itself ends in something like
// " N0=5" cannot be told from a counter; the kernel gives no way to.
func ParseNUMAMaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxNUMAMapsLine)
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		m, err := parseNUMAMapsLine(sc.Text())
		if err != nil {
			return nil, fmt.Errorf("numa_maps line %d: %w", line, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("numa_maps: %w", err)
	}
	return out, nil
}

func parseNUMAMapsLine(s string) (Mapping, error) {
	addr, rest, ok := strings.Cut(s, " ")
	if !ok {
		return Mapping{}, fmt.Errorf("%q has no policy", s)
	}
	var m Mapping
	var err error
	if m.Start, err = strconv.ParseUint(addr, 16, 64); err != nil {
		return Mapping{}, fmt.Errorf("address %q is not hex", addr)
	}
	// Counters from the end.
	var pageKB uint64
	hasPageKB := false
	for {
		i := strings.LastIndexByte(rest, ' ')
		if i < 0 {
			break
		}
		tok := rest[i+1:]
		if tok == "huge" {
			m.Huge = true
			rest = rest[:i]
			continue
		}
		k, v, isKV := strings.Cut(tok, "=")
		if !isKV || !counterKey(k) {
			break
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return Mapping{}, fmt.Errorf("%s=%q is not a count", k, v)
		}
		switch {
		case k == "kernelpagesize_kB":
			pageKB, hasPageKB = n, true
		case k[0] == 'N':
			node, err := strconv.Atoi(k[1:])
			if err != nil || node < 0 || node > MaxNode {
				return Mapping{}, fmt.Errorf("%q is not a node up to %d", k, MaxNode)
			}
			if m.Pages == nil {
				m.Pages = map[int]uint64{}
			}
			if _, dup := m.Pages[node]; dup {
				return Mapping{}, fmt.Errorf("node %d listed twice", node)
			}
			m.Pages[node] = n
		}
		rest = rest[:i]
	}
	if len(m.Pages) > 0 {
		if !hasPageKB || pageKB == 0 {
			return Mapping{}, fmt.Errorf("%q: pages per node without kernelpagesize_kB", s)
		}
		hi, lo := bits.Mul64(pageKB, 1024)
		if hi != 0 {
			return Mapping{}, fmt.Errorf("kernelpagesize_kB=%d overflows", pageKB)
		}
		m.PageSize = lo
		var total uint64
		for _, p := range m.Pages {
			hi, b := bits.Mul64(p, m.PageSize)
			var carry uint64
			total, carry = bits.Add64(total, b, 0)
			if hi != 0 || carry != 0 {
				return Mapping{}, fmt.Errorf("%q: page counts overflow", s)
			}
		}
	} else if hasPageKB {
		m.PageSize = pageKB << 10
	}
	policy, file, hasFile := strings.Cut(rest, " file=")
	switch {
	case hasFile:
		m.File = unescapeOctal(file)
	case strings.HasSuffix(rest, " heap"):
		policy, m.Heap = strings.TrimSuffix(rest, " heap"), true
	case strings.HasSuffix(rest, " stack"):
		policy, m.Stack = strings.TrimSuffix(rest, " stack"), true
	}
	if policy == "" {
		return Mapping{}, fmt.Errorf("%q has no policy", s)
	}
	m.Policy = policy
	return m, nil
}

// counterKey reports whether k is one of the counters numa_maps prints
// after the mapping's name.
func counterKey(k string) bool {
	switch k {
	case "anon", "dirty", "mapped", "mapmax", "swapcache", "active", "writeback", "kernelpagesize_kB":
		return true
	}
	if len(k) < 2 || k[0] != 'N' {
		return false
	}
	return strings.TrimLeft(k[1:], "0123456789") == ""
}

// ReadNUMAMaps reads the numa_maps of process pid (a thread ID reads the
// same, since threads share their memory). A process that has exited is
// an error wrapping os.ErrNotExist.
func ReadNUMAMaps(pid int) ([]Mapping, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/numa_maps")
	if err != nil {
		return nil, fmt.Errorf("read memory placement of pid %d: %w", pid, err)
	}
	defer f.Close()
	ms, err := ParseNUMAMaps(f)
	if err != nil {
		return nil, fmt.Errorf("read memory placement of pid %d: %w", pid, err)
	}
	return ms, nil
}

// unescapeOctal undoes the \ooo escapes the kernel writes in place of
// spaces, tabs, newlines and backslashes in a path (seq_file_path); a
// backslash not followed by three octal digits stays as it is.
func unescapeOctal(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		// Three octal digits up to \377: one byte.
		if s[i] == '\\' && i+3 < len(s) && '0' <= s[i+1] && s[i+1] <= '3' && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }
