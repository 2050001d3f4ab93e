// Package kmsg reads and writes the kernel log through /dev/kmsg, the
// structured interface described in the kernel's
// Documentation/ABI/testing/dev-kmsg.
//
// Reading: every read(2) of /dev/kmsg returns exactly one record,
//
//	prio,seq,usec,flags[,…];message
//	 KEY=value
//
// where prio packs the syslog facility and level (facility<<3 | level), seq
// is the record's sequence number, usec its kernel time stamp in
// microseconds since boot, and the optional continuation lines carry
// device properties (SUBSYSTEM=pci, DEVICE=+pci:0000:18:00.0). Bytes that
// are not printable, and the backslash, are escaped as \xNN. A new reader
// starts at the oldest record still in the ring buffer; Open seeks to the
// end instead, so a follower sees only what is logged after it started.
// OpenReader keeps the start and hands the records on as text; unless it
// follows, it ends where a non-blocking read fails with EAGAIN, the
// device's way of saying the reader has caught up.
// When the ring buffer overwrites records a reader has not read yet, the
// next read fails with EPIPE and the reader continues from the oldest
// record left; the gap in sequence numbers says how many were lost, and the
// Follower counts them.
//
// Writing: a write(2) to /dev/kmsg logs one record. A leading "<N>" sets
// the syslog priority N = facility*8 + level, but the kernel never lets
// user space claim facility 0 (kern): a record written with "<3>" is stored
// as facility 1 (user), level 3, and /dev/kmsg shows it as "11,…". dmesg
// prints it like any other line (dmesg -x and dmesg --facility tell them
// apart); journald files it under _TRANSPORT=kernel but, because its
// facility is not kern, takes a leading "word:" of the text as
// SYSLOG_IDENTIFIER and drops it from MESSAGE. With the default sysctl
// kernel.printk_devkmsg=ratelimit the kernel also limits writes per open
// file (a burst of 10 per 5 s) and silently drops the rest, reporting
// success to the writer; Writer therefore opens the device afresh for
// every record.
package kmsg
