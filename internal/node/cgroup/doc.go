// Package cgroup confines one process in a control group of its own for
// the duration of a fault, on cgroup v1 and v2 alike, and lets a fresh
// process undo it from a record alone.
//
// A Confinement is planned first (where the process's threads live now,
// where ours will be, which limit files to write), recorded by the caller,
// then applied: create our group, write the limits, move the threads in.
// Release lifts our group's CPU quota, moves every thread found in our
// group back to where it came from and removes the group, so it also
// undoes a half-applied plan and threads born inside our group while it
// held them. The quota goes first because a thread moved out while
// throttled is not woken on an idle CPU (see unlimited).
//
// Where our group goes differs by version. On v1 it is a child of the
// process's own group for the controller, which keeps every limit above
// in force. On v2 a group that holds processes cannot hand a controller to
// children ("no internal processes"), so ours is a sibling of the
// process's group, under the same parent; limits set on the process's own
// group itself (rather than its parents) do not apply while it is moved.
//
// Paths read from /proc/PID/cgroup are taken relative to the hierarchy's
// mount, which holds for a process in the host's cgroup namespace (the
// node agent runs there).
package cgroup
