// Package mountinfo reads the kernel's mount table (/proc/PID/mountinfo)
// and finds the mount that holds a path without touching the filesystem,
// for the cgroup hierarchies and for the storage a checkpoint directory
// lives on.
package mountinfo
