// Package xidfault injects hardware faults through the kernel log: the
// kernel-log mechanism of hardware.xid, whose code is a parameter, and of
// the hardware faults whose signature is a driver XID line, each of the
// code its catalogue entry gives (catalog.Signature.XID). Inject writes one
// line,
//
//	NVRM: Xid (PCI:0000:18:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception …
//
// built by xid.FormatLine from the same table the parser reads, for the
// target GPU's real bus id, to /dev/kmsg at level 3 (KERN_ERR, the level
// the driver's os_log_error prints XIDs at). Nothing in the line marks it
// as injected; the engine's ledger records the injection.
//
// What the line reaches:
//
//   - Readers of /dev/kmsg and of dmesg: gpuchaos' XID watcher
//     (internal/node/xidwatch), node-problem-detector's kernel monitor with its
//     kmsg source, rsyslog's imkmsg, dmesg. They see the driver's text
//     exactly. The record's facility is user (1), not kern (0): the kernel
//     gives every user-space write facility user, so the raw record reads
//     "11,seq,…" where the driver's reads "3,seq,…", and a reader filtering
//     on facility kern (dmesg --facility kern, a "kern.*" syslog rule fed
//     from the kernel) skips it.
//   - journald and what reads the journal: the record arrives with
//     _TRANSPORT=kernel and PRIORITY=3, but, its facility not being kern,
//     journald takes "NVRM:" as SYSLOG_IDENTIFIER and stores MESSAGE without
//     it ("Xid (PCI:0000:18:00): 13, …"); the driver's line has
//     SYSLOG_IDENTIFIER=kernel and the whole text in MESSAGE. journalctl -k
//     prints "NVRM: Xid (PCI:…" for both. A watcher that selects
//     _TRANSPORT=kernel and matches "Xid \(PCI" sees it; one that requires
//     "NVRM: Xid" in MESSAGE (NVSentinel's syslog-health-monitor, which
//     reads the journal with _TRANSPORT=kernel) or selects
//     SYSLOG_IDENTIFIER=kernel (node-problem-detector's journald source)
//     does not.
//
// What it cannot reach: the driver's own state, NVML (nvmlDeviceGetXid…
// events, retired pages, remapped rows), DCGM and dcgm-exporter's
// DCGM_FI_DEV_XID_ERRORS (DCGM takes XIDs from the driver's event
// interface, not the log), and the job, whose CUDA context is untouched.
// Those layers need a real fault or the dcgm-inject mechanism.
//
// Recover is a no-op that succeeds: a kernel log line cannot be unwritten.
// Whatever a watcher did on seeing it (a node condition, a drain) has to be
// undone by that watcher's own recovery path.
package xidfault
