// Package limitread reads a whole file that must be small, without ever
// holding more than its limit: a regular file is refused by its size
// before it is read, and anything else (a pipe, a FIFO, /dev/zero) once a
// byte past the limit has been read. Every loader of a user-named file
// goes through it, so none can be made to fill memory.
package limitread

import (
	"fmt"
	"io"
	"os"
)

// TooLargeError reports a file over its limit.
type TooLargeError struct {
	Path  string
	Limit int64
	// Size is the file's size when it is a regular file; -1 when it was
	// read up to the limit and went on (a pipe or a device).
	Size int64
}

func (e *TooLargeError) Error() string {
	if e.Size >= 0 {
		return fmt.Sprintf("%s: %d bytes, over the limit of %d", e.Path, e.Size, e.Limit)
	}
	return fmt.Sprintf("%s: more than the limit of %d bytes", e.Path, e.Limit)
}

// File returns the contents of path, at most limit bytes, or a
// *TooLargeError. Errors from opening the file come back as os.Open
// returns them, so callers can test them with errors.Is(err,
// fs.ErrNotExist).
func File(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > limit {
		return nil, &TooLargeError{Path: path, Limit: limit, Size: st.Size()}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, &TooLargeError{Path: path, Limit: limit, Size: -1}
	}
	return data, nil
}
