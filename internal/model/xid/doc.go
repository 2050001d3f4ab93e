// Package xid knows NVIDIA XID errors from both sides: a table of codes with
// the catalogue message each prints and the action it calls for, a formatter
// that writes a line exactly as the driver does, and a parser that reads XID
// and NVSwitch SXid events back out of kernel log text in any common shape
// (raw /dev/kmsg records, dmesg with monotonic, ctime or ISO stamps and
// with -x's facility and level, journalctl and syslog lines).
//
// The injector and the twin write lines with FormatLine; detectors and
// 'gpuchaos xid parse' read them with ParseLine. Both take codes and actions
// from the one table here, so what we inject is what we can recognise
// (STYLE.md: one catalogue feeds both sides). The table is NVIDIA's XID
// catalogue, kept as data in catalog.csv with its source and the mapping
// from NVIDIA's resolution buckets to our actions; a code it does not list
// parses with ActionUnknown.
package xid
