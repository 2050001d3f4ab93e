// Package gpu gives the rest of gpuchaos read access to the GPUs of one
// node behind one small interface, Source, so that the agent's exporter,
// burn's telemetry sampling and the local target run the same code on a
// real machine (NVML) and on the digital twin (no GPU at all). This package
// holds only the interface and its plain types; the NVML implementation is
// nvmlgpu and the twin's is twin/twingpu, so what reads the twin's GPUs
// links no hardware library.
//
// Units follow dcgm-exporter, so that a value read here can be exported as
// the DCGM field of the same name without conversion: clocks in MHz,
// temperatures in °C, power in W, energy in mJ, memory in MiB, utilisation
// in percent (0–100), counters as plain counts.
//
// A value the GPU or its driver does not report is NaN (floating-point
// fields) or flagged by its Has… field; it never fails the whole sample,
// because an exporter that loses every series when one optional counter is
// unsupported would hide the GPU from alerting. A GPU that has stopped
// answering (NVML's GPU_IS_LOST, a twin GPU off the bus) fails Sample with
// an error that wraps ErrGPULost.
package gpu
