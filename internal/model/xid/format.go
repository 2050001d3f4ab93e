package xid

import (
	"strconv"
	"strings"
)

// unknown is what the driver prints for a process it cannot attribute.
const unknown = "<unknown>"

// FormatLine writes an XID line exactly as the NVIDIA driver prints it
// (kernel_rc.c in NVIDIA/open-gpu-kernel-modules):
//
//	NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.
//
// pci may be in the driver's form (0000:3b:00) or DCGM/NVML's
// (00000000:3B:00.0); it is normalised to the driver's form, and written
// as given when it cannot be read. A negative pid prints as
// pid='<unknown>', name=<unknown>, as the driver does when no channel owns
// the error; an empty process prints as <unknown>. An empty text takes the
// table's catalogue text for code.
func FormatLine(pci string, code int, pid int, process string, text string) string {
	if p, ok := NormalizePCI(pci); ok {
		pci = p
	}
	if text == "" {
		if in, ok := Lookup(code); ok {
			text = in.Text
		}
	}
	pidS := "'" + unknown + "'"
	if pid >= 0 {
		pidS = strconv.Itoa(pid)
	}
	if pid < 0 || process == "" {
		process = unknown
	}
	var b strings.Builder
	b.WriteString("NVRM: Xid (PCI:")
	b.WriteString(pci)
	b.WriteString("): ")
	b.WriteString(strconv.Itoa(code))
	b.WriteString(", pid=")
	b.WriteString(pidS)
	b.WriteString(", name=")
	b.WriteString(process)
	b.WriteString(", ")
	b.WriteString(text)
	return b.String()
}

// FormatSXidLine writes an NVSwitch SXid line as the nvidia-nvswitch driver
// prints it, for example
//
//	nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)
//
// sw is the switch instance (the N in nvidia-nvswitchN). The switch driver
// keeps the PCI function in the address, so pci is written as
// domain:bus:device.function.
func FormatSXidLine(sw int, pci string, code int, fatal bool, text string) string {
	if p, ok := NormalizePCI(pci); ok {
		fn := "0"
		if i := strings.LastIndexByte(pci, '.'); i >= 0 {
			fn = pci[i+1:]
		}
		pci = p + "." + strings.ToLower(fn)
	}
	sev := "Non-fatal"
	if fatal {
		sev = "Fatal"
	}
	return "nvidia-nvswitch" + strconv.Itoa(sw) + ": SXid (PCI:" + pci + "): " +
		strconv.Itoa(code) + ", " + sev + ", " + text
}

// NormalizePCI turns a PCI address into the driver's domain:bus:device form
// in lower case (0000:3b:00). It accepts that form, the same with a
// function (0000:3b:00.0), and DCGM/NVML's eight-digit domain
// (00000000:3B:00.0); a domain wider than four digits must have leading
// zeros only. It reports false for anything else.
func NormalizePCI(s string) (string, bool) {
	s = trimPCI(s)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		fn := s[i+1:]
		if len(fn) != 1 || !isHex(fn) {
			return "", false
		}
		s = s[:i]
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return "", false
	}
	dom, bus, dev := parts[0], parts[1], parts[2]
	if len(dom) > 4 {
		if strings.Trim(dom[:len(dom)-4], "0") != "" || len(dom) > 8 {
			return "", false
		}
		dom = dom[len(dom)-4:]
	}
	if len(dom) != 4 || len(bus) != 2 || len(dev) != 2 || !isHex(dom+bus+dev) {
		return "", false
	}
	return strings.ToLower(dom + ":" + bus + ":" + dev), true
}

// trimPCI drops a "PCI:" prefix and surrounding space.
func trimPCI(s string) string {
	s = strings.TrimSpace(s)
	return strings.TrimPrefix(s, "PCI:")
}

func isHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
