package image

import (
	"strings"
	"testing"
)

// The outputs are dpkg-query -S on Debian 12 (bookworm, dpkg 1.21):
//
//	dpkg-query -S /lib/x86_64-linux-gnu/libc.so.6
//	dpkg-query -S /bin/sh                      (dash diverts /bin/sh)
//	dpkg-query -S /usr/share/doc               (many owners, one line)
func TestParseSearch(t *testing.T) {
	for _, tc := range []struct {
		name, out, path, want, err string
	}{
		{"one owner", "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6\n", "/lib/x86_64-linux-gnu/libc.so.6", "libc6:amd64", ""},
		{"diversion lines", "diversion by dash from: /bin/sh\ndiversion by dash to: /bin/sh.distrib\ndash: /bin/sh\n", "/bin/sh", "dash", ""},
		{"a pattern's other matches", "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6.old\nlibc6:amd64: /lib/x86_64-linux-gnu/libc.so.6\n", "/lib/x86_64-linux-gnu/libc.so.6", "libc6:amd64", ""},
		{"shared folder", "libc6:amd64, dash, tzdata: /usr/share/doc\n", "/usr/share/doc", "", "owned by 3 packages"},
		{"no line for the path", "dash: /bin/dash\n", "/bin/sh", "", "no line"},
		{"empty", "", "/bin/sh", "", "no line"},
		{"bad name", "lib c6: /x\n", "/x", "", "bad package name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSearch([]byte(tc.out), tc.path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parseSearch = %q, %v; want an error with %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseSearch = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// FuzzParseSearch: no output panics the parser, and a package it returns
// is one name, named on a line for exactly the path.
func FuzzParseSearch(f *testing.F) {
	f.Add([]byte("libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6\n"), "/lib/x86_64-linux-gnu/libc.so.6")
	f.Add([]byte("diversion by dash from: /bin/sh\ndash: /bin/sh\n"), "/bin/sh")
	f.Add([]byte("a, b: /x\n"), "/x")
	f.Fuzz(func(t *testing.T, out []byte, path string) {
		got, err := parseSearch(out, path)
		if err != nil {
			return
		}
		if got == "" || strings.ContainsAny(got, " \t\r,") {
			t.Fatalf("package %q", got)
		}
		if !strings.Contains(string(out), got+": "+path) {
			t.Fatalf("package %q not on a line for %q", got, path)
		}
	})
}
