// Package mountinfo reads the kernel's mount table (/proc/PID/mountinfo)
// and finds the mount that holds a path without touching the filesystem,
// for the cgroup hierarchies and for the storage a checkpoint directory
// lives on.
//
// The parser is ours, not prometheus/procfs' (GetProcMounts), which the
// other /proc readers of gpuchaos use: procfs (v0.22.0) leaves the
// kernel's \ooo escapes in the paths it returns, so a mount point with a
// space reads as "/mnt/my\040data" and never matches the path it holds.
package mountinfo
