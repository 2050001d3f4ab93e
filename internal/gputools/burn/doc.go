// Package burn runs a GPU burn: every selected GPU multiplies random
// matrices as fast as cuBLAS allows, for a fixed duration, while checking
// for silent data corruption and watching temperature.
//
// Each GPU gets its own goroutine locked to an OS thread (the CUDA context
// is current per thread). Inputs are drawn on the GPU by a PTX kernel from
// a counter-based hash, so nothing crosses PCIe and a seed replays the
// same data. The products run in batches timed with CUDA events; between
// batches the last product is compared bit for bit with a reference
// product computed at the start from the same inputs, by the same cuBLAS
// handle on the same stream with atomics disallowed, which a healthy GPU
// reproduces exactly. Every differing element is counted and reported with
// its GPU.
//
// Telemetry (temperature, power, clocks, clock-event reasons) is injected
// as a function, read every second into the result's trace; when any GPU
// reaches the temperature ceiling the burn stops within one batch, well
// inside two seconds. A burn always has a duration, at most MaxDuration.
//
// A duty cycle (Options.Duty) below 1 idles each GPU after every batch in
// proportion to the batch's time, so utilisation counters read about the
// duty while each batch still runs on every SM.
package burn
