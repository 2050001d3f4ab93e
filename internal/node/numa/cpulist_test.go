package numa

import (
	"slices"
	"testing"
)

func TestParseCPUList(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   string
		want []int
		err  bool
	}{
		{name: "empty (memory-only node)", in: "\n", want: nil},
		{name: "one cpu", in: "0\n", want: []int{0}},
		{name: "range", in: "0-1\n", want: []int{0, 1}},
		{name: "two sockets of a dgx", in: "0-55,112-167", want: append(seq(0, 55), seq(112, 167)...)},
		{name: "unsorted with overlap", in: "8,2-4,3", want: []int{2, 3, 4, 8}},
		{name: "stride group", in: "0-15:2/4", want: []int{0, 1, 4, 5, 8, 9, 12, 13}},
		{name: "spaces around elements", in: " 1 , 3 ", want: []int{1, 3}},
		{name: "reversed range", in: "3-1", err: true},
		{name: "empty element", in: "1,,2", err: true},
		{name: "trailing comma", in: "1,", err: true},
		{name: "sign", in: "+1", err: true},
		{name: "negative", in: "-1", err: true},
		{name: "hex", in: "0x1", err: true},
		{name: "huge range refused", in: "0-4000000000", err: true},
		{name: "stride without range", in: "4:1/2", err: true},
		{name: "stride used above size", in: "0-7:3/2", err: true},
		{name: "stride size zero", in: "0-7:0/0", err: true},
		{name: "stride without slash", in: "0-7:2", err: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseCPUList(c.in)
			if c.err {
				if err == nil {
					t.Fatalf("ParseCPUList(%q) = %v, want an error", c.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseCPUList(%q): %v", c.in, err)
			}
			if !slices.Equal(got, c.want) {
				t.Fatalf("ParseCPUList(%q) = %v, want %v", c.in, got, c.want)
			}
		})
	}
}

func TestFormatCPUList(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		in   []int
		want string
	}{
		{"empty", nil, ""},
		{"one", []int{7}, "7"},
		{"runs and singles", []int{0, 1, 2, 3, 8, 10, 11}, "0-3,8,10-11"},
		{"unsorted duplicates", []int{3, 1, 2, 2}, "1-3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := FormatCPUList(c.in); got != c.want {
				t.Fatalf("FormatCPUList(%v) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

func FuzzParseCPUList(f *testing.F) {
	for _, s := range []string{"0", "0-1\n", "0-55,112-167", "0-15:2/4", "", "1,,2", "3-1", "65536"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := ParseCPUList(s)
		if err != nil {
			return
		}
		if !slices.IsSorted(cpus) || len(slices.Compact(slices.Clone(cpus))) != len(cpus) {
			t.Fatalf("ParseCPUList(%q) = %v: not sorted and unique", s, cpus)
		}
		// Printing and parsing again is the identity on what parsed.
		again, err := ParseCPUList(FormatCPUList(cpus))
		if err != nil || !slices.Equal(again, cpus) {
			t.Fatalf("round trip of %v: %v, %v", cpus, again, err)
		}
	})
}

// seq returns lo..hi inclusive.
func seq(lo, hi int) []int {
	var out []int
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}
