package numa

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds the CPU numbers ParseCPUList accepts. Linux builds with at
// most 8192 CPUs (NR_CPUS); the bound keeps a hostile or corrupt list such
// as "0-4000000000" from allocating gigabytes.
const MaxCPU = 1 << 16

// ParseCPUList parses the kernel's list syntax for CPU and node sets, as
// /sys/devices/system/node/*/cpulist, /sys/devices/system/node/online and
// the Cpus_allowed_list line of /proc/PID/status print it: comma-separated
// numbers and inclusive ranges ("0-3,8,10-11"), where a range may carry a
// stride group "a-b:used/size" (bitmap_parselist's syntax, "0-15:2/4" is
// 0,1,4,5,8,9,12,13). Surrounding white space is ignored and an empty list
// is the empty set. The result is sorted, without duplicates.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	seen := map[int]bool{}
	for part := range strings.SplitSeq(s, ",") {
		if err := parseCPURange(strings.TrimSpace(part), seen); err != nil {
			return nil, fmt.Errorf("cpu list %q: %w", s, err)
		}
	}
	out := make([]int, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	slices.Sort(out)
	return out, nil
}

func parseCPURange(part string, seen map[int]bool) error {
	if part == "" {
		return errors.New("empty element")
	}
	rng, group, hasGroup := strings.Cut(part, ":")
	loS, hiS, isRange := strings.Cut(rng, "-")
	lo, err := parseCPU(loS)
	if err != nil {
		return err
	}
	hi := lo
	if isRange {
		if hi, err = parseCPU(hiS); err != nil {
			return err
		}
		if hi < lo {
			return fmt.Errorf("range %q ends before it starts", rng)
		}
	}
	used, size := 1, 1
	if hasGroup {
		if !isRange {
			return fmt.Errorf("%q: a stride group needs a range", part)
		}
		u, sz, ok := strings.Cut(group, "/")
		if !ok {
			return fmt.Errorf("%q: stride group is not used/size", part)
		}
		if used, err = parseCPU(u); err != nil {
			return err
		}
		if size, err = parseCPU(sz); err != nil {
			return err
		}
		if used == 0 || size == 0 || used > size {
			return fmt.Errorf("%q: stride group needs 0 < used <= size", part)
		}
	}
	for c := lo; c <= hi; c++ {
		if (c-lo)%size < used {
			seen[c] = true
		}
	}
	return nil
}

func parseCPU(s string) (int, error) {
	// Only plain decimal digits: strconv.Atoi alone would take "+3".
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a cpu number", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxCPU {
		return 0, fmt.Errorf("%q is not a cpu number up to %d", s, MaxCPU)
	}
	return n, nil
}

// FormatCPUList prints a set in the kernel's list syntax with ranges
// ("0-3,8"); the input need not be sorted or unique.
func FormatCPUList(cpus []int) string {
	c := slices.Clone(cpus)
	slices.Sort(c)
	c = slices.Compact(c)
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(c[j]))
		}
		i = j + 1
	}
	return b.String()
}
