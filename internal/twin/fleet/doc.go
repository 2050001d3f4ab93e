// Package fleet is the fleet-scale twin behind 'gpuchaos twin simulate': a
// discrete-event simulation of one synchronous data-parallel training job
// that spans every GPU of a fleet for days or months, as Llama 3 405B
// pre-training spanned 16,384 H100 GPUs. In such a job any single failure
// stops every rank, so what the fleet delivers is decided by how often
// something fails, how much work each failure throws away and how long the
// job takes to come back. The package answers with goodput, effective
// training time ratio (ETTR), interruptions by class and lost GPU-hours.
// It stands alone: the per-experiment twin in internal/twin reads its
// DefaultRates, not the other way round.
//
// # Failure classes and rates
//
// The default classes and rates come from DESIGN.md §6 and the Llama 3
// paper's Table 5: 419 unexpected interruptions in a 54-day snapshot on
// 16,384 H100 GPUs, 21,233,664 GPU-hours, about 1.97e-5 interruptions per
// GPU-hour. Each class's rate is its Table 5 count over those GPU-hours:
// faulty GPU 148, HBM3 72, software bug 54, network switch or cable 35, host
// maintenance 32, SRAM 19, GSP 17, NIC 7, NCCL watchdog 7, silent data
// corruption 6, thermal interface or sensor 6, and "other" 16 (SSD, power
// supply, chassis, IO board, dependency, CPU and system memory). The table
// is not quite self-consistent: it prints 30.1 % beside the 148 faulty-GPU
// interruptions, which are 35.3 % of 419, while every other row's share is
// its count over 419 and the counts add up to 419. We take the counts, so
// the total matches the headline figure and the faulty-GPU share is 35.3 %
// rather than 30 %.
//
// Each class also carries a recovery time added to the job's restart cost.
// Those are our assumptions, not measurements: five minutes to drain a node
// and restart on a hot spare for hardware and host classes, nothing extra
// for software bugs, and PyTorch's ten-minute NCCL watchdog timeout for a
// hung collective. A rates file (LoadRates) replaces the rates of the
// classes it names.
//
// # Arrivals
//
// Every GPU fails by class c as an independent Poisson process of rate λc
// per GPU-hour. The simulator does not keep one process per GPU: it keeps
// one per class, of rate N·λc, and picks the GPU hit uniformly at random.
// That is exact, not an approximation. The superposition of independent
// Poisson processes is a Poisson process whose rate is the sum of theirs
// (counts of independent Poisson variables add, and independent increments
// survive the sum), and given that an arrival occurred, the chance that
// GPU i produced it is λc / (N·λc) = 1/N. It relies on the fleet size
// staying N, which holds because a failed GPU's node is swapped for a spare
// before the job resumes, and on failures striking whether or not the job
// is running, which is also how the Llama 3 rates were measured: counts
// over wall-clock GPU-hours. Each class draws from its own random stream
// keyed by seed and class name, so runs that differ only in checkpoint or
// restart settings see the very same failures, which makes comparisons
// between them sharp (common random numbers).
//
// # The job
//
// The job is a state machine on a virtual clock driven by a time-ordered
// event heap (container/heap; ties broken by event kind, then by insertion
// order, so a seed fixes the whole run):
//
//   - running: training advances. After every CheckpointInterval of
//     running time the job checkpoints.
//   - stalled: a synchronous checkpoint stalls training for CheckpointCost
//     and becomes the restore point when the stall ends. An asynchronous one
//     stalls only for the snapshot (AsyncStall, by default the 149 s → 6 s
//     ratio measured for a 7B model, DESIGN.md §6) and becomes the restore
//     point once its background write, CheckpointCost long, is done.
//   - down: any failure while running or stalled is an interruption: work
//     since the restore point is lost and the job is down for RestartCost
//     plus the class's recovery, then resumes from the restore point.
//
// A failure that strikes while the job is already down counts as an
// interruption too, flagged DuringRestart: in a real fleet it aborts or
// stalls the relaunch just as it would stop the job, it is what an operator
// counting interruptions to the job would log, and counting it keeps the
// expected count at N·Σλc times the window, which is how the Llama 3 figure
// was turned into a rate. It loses no work (nothing ran since the rollback)
// and extends the down time to its own restart and recovery if that ends
// later. Work after the last checkpoint at the end of the window is counted
// as kept, since nothing interrupted it.
//
// # Figures
//
// Wall time splits exactly into productive (kept) training, lost work,
// restart and checkpoint stall. ETTR is productive time over wall time, as
// Meta's reliability studies define it; goodput is kept GPU-hours over
// GPU-hours held, equal to ETTR here because the job holds the whole fleet
// at full speed. Lost GPU-hours are GPUs × (wall − productive), split by
// cause. MTBF is measured, wall time over interruptions, and Young's
// interval √(2 · stall · MTBF) is reported beside the interval used
// (DESIGN.md §6).
//
// A 30-day run on 16,384 GPUs is a few hundred failures and about 1,200
// checkpoints, so it takes about a millisecond; cancellation is checked every
// thousand or so events.
package fleet
