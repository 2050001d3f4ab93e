// Package numafault injects the NUMA faults of the catalogue on a local
// node, the talk's strategy 7:
//
//   - numa.remote-memory (mechanism migrate-pages) moves every page of a
//     running rank to the node farthest from its GPU with migrate_pages(2),
//     and back on recovery;
//   - numa.wrong-affinity (sched-setaffinity) sets the CPU affinity of
//     every thread of a running rank to the CPUs of the node farthest from
//     its GPU, and restores each thread's own mask on recovery;
//   - numa.memory-pressure (memory-hog) starts a child process that binds
//     fraction × the free memory of the GPU's node to that node
//     (mbind MPOL_BIND) and touches every page;
//   - numa.cpu-saturation (cpu-hog) starts a child process whose busy
//     threads are each pinned to one CPU of the GPU's node.
//
// The first two need a second node: on a machine with one they refuse
// with a one-line reason that names the node count, before touching
// anything. The last two work on one node. The GPU's node comes from
// Options.GPUNode (NVML's, through internal/node/gpu) and the layout from
// /sys/devices/system/node (internal/node/numa).
//
// The remote node is chosen among those the rank's cpuset allows (its
// cpuset group's effective CPUs and memory nodes, as a Kubernetes pod's
// container has one), and a rank is pinned to the CPUs of that node the
// cpuset allows: the kernel would narrow a wider mask silently, or refuse
// an empty one. A cpuset that allows no remote node is refused in one line
// naming what it allows; it is never widened.
//
// A rank is named by the pid parameter or, when it is 0, by the target's
// job and rank: the process whose environment (/proc/PID/environ) holds
// GPUCHAOS_JOB=<job> and RANK=<rank>.
//
// Recovery may run in a fresh process after the injecting one was killed,
// so everything it needs is on disk before anything changes: StateDir/KEY.json,
// written atomically, records the rank's pid with its start time (field 22
// of /proc/PID/stat, so a reused pid is never touched), the nodes its
// memory was on, every thread's original CPU mask, and each hog child's pid
// and start time; each hog also carries the key's mark in its environment
// (childproc.Spec.Mark), by which Recover finds one its injector was
// killed too early to record. A rank that has ended is reported gone with
// the proof (procfind.Proc.Gone). Hog children are gpuchaos itself in the
// hidden mode RunHog serves; they die with the thread that started them
// (Pdeathsig), run in a process group of their own, and end on their own
// shortly after the time fault.HoldUntil gives, so nothing outlives an
// experiment that nobody recovers. With Options.HogCgroups (the node
// agent's) a hog first moves into the groups it names, the node level
// above the agent's pod, and runs without Pdeathsig, so that an agent
// restart leaves the fault in place for the next agent to recover.
package numafault
