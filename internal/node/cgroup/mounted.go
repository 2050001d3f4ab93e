package cgroup

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Mounted checks that h's mount point still holds a cgroup hierarchy of
// h's version, so that a group missing under it is missing from the
// hierarchy rather than from a path the hierarchy is no longer mounted
// at (a recovery run in another mount namespace, a hierarchy unmounted
// since): only then does Release's "already gone" prove anything.
func (h Hierarchy) Mounted() error {
	var fs unix.Statfs_t
	if err := unix.Statfs(h.Mount, &fs); err != nil {
		return fmt.Errorf("cgroup v%d hierarchy at %s: %w", h.Version, h.Mount, err)
	}
	want := int64(unix.CGROUP2_SUPER_MAGIC)
	if h.Version == V1 {
		want = unix.CGROUP_SUPER_MAGIC
	}
	if int64(fs.Type) != want {
		return fmt.Errorf("%s holds a filesystem of magic %#x, not the cgroup v%d hierarchy (%#x) the record names", h.Mount, fs.Type, h.Version, want)
	}
	return nil
}
