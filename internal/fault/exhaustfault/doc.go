// Package exhaustfault injects the exhaustion faults on a local node by running
// gpuchaos' own burn and exhaust commands as child processes:
// exhaustion.sm-burn, exhaustion.thermal-soak and exhaustion.noisy-neighbour
// (mechanism burn) run `gpuchaos burn`, exhaustion.vram and the
// neighbour's memory run `gpuchaos exhaust vram`, and exhaustion.pcie runs
// `gpuchaos exhaust pcie`. A separate process is what a real co-tenant is,
// so the load reaches NVML, DCGM and the exporters exactly as one would.
//
// Nothing a crash could lose lives only in memory. Before a child starts,
// the key's state file (StateDir/KEY.json, written atomically) records the
// injection; once each child runs it also records the child's pid, the
// start time the kernel gives it in /proc/PID/stat and its argv, so a
// fresh injector in a fresh process can stop exactly those processes and
// never a later process that reused a pid. Each child also carries the
// key's mark in its environment (childproc.Spec.Mark), by which Recover
// finds and stops a child that its injector was killed too early to
// record. Three further guards keep a child from outliving the experiment
// when nobody recovers it: each child gets SIGKILL when the thread that
// started it dies (Pdeathsig, from a thread kept for the child's whole
// life), runs in a process group of its own, and has a duration that ends
// it on its own shortly after the time fault.HoldUntil gives (the
// experiment's end plus its recovery window).
//
// Inject returns once every child has written "ready" on the pipe given by
// the hidden --ready-fd flag, that is once the GPU is really burning, the
// memory really held or the first copies really queued; a child that fails
// first is reported with the last lines of its log (StateDir/KEY.log), and
// nothing is left running.
package exhaustfault
