package procfind

import (
	"errors"
	"io/fs"
)

// Reason is why a file operation failed without the path a *fs.PathError
// repeats ("permission denied" for "open /proc/7/fd: permission
// denied"), for a message that names the file, or the process it belongs
// to, in words of its own. Any other error is its whole text.
func Reason(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
