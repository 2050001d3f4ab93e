package limitread_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuchaos/gpuchaos/internal/model/limitread"
)

func TestFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name string, n int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, n), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name     string
		path     string
		wantLen  int
		wantSize int64 // of the TooLargeError; 0: no error
		wantErr  error
	}{
		{name: "under the limit", path: write("small", 10), wantLen: 10},
		{name: "at the limit", path: write("exact", 64), wantLen: 64},
		{name: "over the limit, by its size", path: write("big", 65), wantSize: 65},
		{name: "endless device", path: "/dev/zero", wantSize: -1},
		{name: "missing", path: filepath.Join(dir, "absent"), wantErr: fs.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := limitread.File(tt.path, 64)
			var tl *limitread.TooLargeError
			switch {
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err %v, want %v", err, tt.wantErr)
				}
			case tt.wantSize != 0:
				if !errors.As(err, &tl) || tl.Size != tt.wantSize || tl.Limit != 64 || tl.Path != tt.path {
					t.Fatalf("err %#v, want a TooLargeError of size %d", err, tt.wantSize)
				}
			case err != nil || len(b) != tt.wantLen:
				t.Fatalf("got %d bytes, %v; want %d", len(b), err, tt.wantLen)
			}
		})
	}
}
