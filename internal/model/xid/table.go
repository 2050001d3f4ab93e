package xid

import (
	_ "embed"
	"encoding/csv"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Action is what an operator should do about an XID, as NVIDIA's XID
// catalogue recommends it.
type Action string

// The actions an XID can call for.
const (
	// ActionNone means no immediate action: the driver or hardware has
	// handled the error (a row remap recorded, an error contained).
	ActionNone Action = "none"
	// ActionRestartApp means the application on that GPU must restart;
	// the GPU itself is fine.
	ActionRestartApp Action = "restart-app"
	// ActionResetGPU means the GPU must be reset (nvidia-smi -r, or a
	// reboot where a reset is not possible) before it is used again.
	ActionResetGPU Action = "reset-gpu"
	// ActionReboot means the node must be rebooted: the GPU is no longer
	// reachable from the driver.
	ActionReboot Action = "reboot"
	// ActionInvestigate means the catalogue gives a diagnosis workflow
	// rather than a single action (NVLink errors, firmware faults): look
	// at the registers in the message and the surrounding events.
	ActionInvestigate Action = "investigate"
	// ActionSeeText marks a code whose action is carried in the line
	// itself (XID 154). It appears only in the table: an Event always
	// carries the action read from its text.
	ActionSeeText Action = "see-text"
	// ActionUnknown marks an XID whose code is not in the table (a code
	// newer than the catalogue we carry, or a corrupt line): gpuchaos does
	// not know what it calls for. It appears only on an Event, never in the
	// table.
	ActionUnknown Action = "unknown"
)

// Info describes one XID code.
type Info struct {
	// Code is the XID number.
	Code int `json:"code"`
	// Name is a short human name for the error: ours where we wrote one,
	// otherwise NVIDIA's short description.
	Name string `json:"name"`
	// Mnemonic is NVIDIA's mnemonic for the code (ROBUST_CHANNEL_GPU_ECC_DBE).
	Mnemonic string `json:"mnemonic"`
	// Text is a catalogue message that follows the code (and the pid and
	// process name) in a real NVRM line. Messages carry per-event details
	// (channels, addresses, registers); Text is one representative line.
	// For a code we have no message for it is the catalogue's name (see
	// table), which FormatLine writes when asked for the table's text.
	Text string `json:"text"`
	// Action is the recommended action.
	Action Action `json:"action"`
	// Resolution is NVIDIA's immediate-action resolution bucket for the
	// code (RESET_GPU, RESTART_APP, IGNORE, ...); UNSPECIFIED where the
	// catalogue gives none.
	Resolution string `json:"resolution"`
	// Investigatory is NVIDIA's investigatory-action bucket, empty where
	// the catalogue gives none.
	Investigatory string `json:"investigatory,omitempty"`
	// Description says what the error means and why the action follows.
	Description string `json:"description"`
}

// catalogCSV is NVIDIA's XID catalogue with our action per code; its
// header names the document, the version and the mapping from NVIDIA's
// resolution buckets to our actions.
//
//go:embed catalog.csv
var catalogCSV string

// written holds what we wrote by hand for the codes gpuchaos injects and
// the twin plays; it wins over the catalogue's short description.
type written struct {
	name, text, description string
}

// handWritten returns our own names, texts and descriptions. Texts: 13, 31,
// 43, 48, 63, 74, 79, 94, 95, 109, 119, 120, 145 and 154 are shaped after
// lines published in public bug reports and NVIDIA forum posts; the rest
// are plausible messages of the same form written by us, not captured from
// a driver. Descriptions are in our own words. Actions are in catalog.csv.
func handWritten() map[int]written {
	return map[int]written{
		8: {"GPU stopped processing", "Channel 00000010 watchdog timeout",
			"The channel stopped making progress and the robust-channel watchdog fired (catalogue mnemonic FIFO_ERROR_IDLE_TIMEOUT). Usually an application or driver hang; restart the application."},
		13: {"Graphics engine exception", "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address",
			"A shader or kernel faulted on the graphics/compute engine, most often an out-of-bounds access in the application. The GPU is healthy; restart the application and fix the kernel if it repeats."},
		31: {"GPU memory page fault", "Ch 00000010, intr 00000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f2c_4a000000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
			"The GPU MMU reported an invalid access: usually an application touching memory it does not own, rarely a driver bug. Restart the application."},
		32: {"Invalid or corrupted push buffer stream", "Channel ID 00000010 intr0 00040000",
			"The PBDMA engine read a corrupt command stream, caused by the application, the driver or PCIe corruption. Restart the application; look at PCIe errors if it repeats."},
		38: {"Driver firmware error", "Ch 00000010, engmask 00000101",
			"The FECS firmware reported a watchdog timeout. The catalogue asks for no action unless it repeats."},
		43: {"GPU stopped processing (reset channel)", "channel 0x00000010",
			"The GPU stopped the application's channel after a fault in that application (typically follows XID 13 or 31). The GPU stays usable; restart the application."},
		45: {"Preemptive cleanup, due to previous errors", "Ch 00000010",
			"The driver tore down channels because of an earlier error or because the process was killed. It is a consequence, not a cause: look at the XIDs just before it."},
		46: {"GPU timeout error", "Ch 00000010, GPU timeout",
			"The GPU stopped responding to the driver within its timeout. Reset the GPU."},
		48: {"Double-bit ECC error", "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 4, subpartition 1.",
			"HBM/framebuffer memory returned an uncorrectable double-bit error; applications using that memory are lost. Reset the GPU so the affected row is remapped or the page retired."},
		56: {"Display engine error", "CMDre 00000001 00000000 00000000 00000000 00000000",
			"The display engine raised an exception (a driver or display hardware problem). Report it with the surrounding log."},
		57: {"Error programming video memory interface", "Error programming video memory interface",
			"The driver failed to train the memory interface: a hardware or board problem. Run field diagnostics."},
		58: {"Unstable video memory interface", "Unstable video memory interface detected",
			"The memory interface is unstable (signal integrity, board or thermal). Run field diagnostics."},
		61: {"Internal micro-controller breakpoint/warning", "0cec(3098) 00000000 00000000",
			"The PMU hit an internal breakpoint or warning. Usually firmware or hardware; collect a bug report."},
		62: {"Internal micro-controller halt", "Internal micro-controller halt",
			"The PMU halted; the GPU cannot manage power and clocks without it. Reset the GPU."},
		63: {"Row remapping event", "Row Remapper: New row (0x0000000e9b9107e0) marked for remapping, reset gpu to activate.",
			"A memory row was marked for remapping after an error. Nothing to do now: the remap takes effect at the next GPU reset, which can wait for a maintenance window."},
		64: {"Row remapping failure", "Row Remapper: Failed to mark row (0x0000000e9b9107e0) for remapping.",
			"The GPU could not remap a failing row (a bank is out of spare rows). Reset the GPU; if it recurs the board meets NVIDIA's RMA criteria."},
		68: {"NVDEC0 exception", "NVDEC0 Exception: Error Code 0x00000004",
			"The video decoder engine faulted, usually because of the application's input. Restart the application."},
		69: {"Graphics engine class error", "Class Error: ChId 0010, Class 0000c7c0, Offset 00000000, Data 00000000, ErrorCode 00000004",
			"The application sent an invalid method to the graphics engine. Restart the application."},
		74: {"NVLink error", "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
			"An NVLink reported errors. The catalogue's workflow decodes the seven registers in the message: some bits are benign, some call for re-seating the link or a GPU reset. Investigate before acting."},
		79: {"GPU has fallen off the bus", "GPU has fallen off the bus.",
			"The GPU no longer answers on PCIe (power, thermal, link or board failure). The driver cannot recover it; reboot the node and check the hardware if it repeats."},
		92: {"High single-bit ECC error rate", "High single-bit ECC error rate detected",
			"Correctable single-bit errors are arriving fast. They are corrected, so no immediate action; watch the rate and the remapped-rows counters."},
		94: {"Contained ECC error", "Contained: CE User Channel (0x9). RST: No, D-RST: No",
			"An uncorrectable memory error was contained to the application that touched it; that application is terminated and other work continues. No action on the GPU is needed now."},
		95: {"Uncontained ECC error", "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No",
			"An uncorrectable memory error could not be contained: every application on the GPU is affected. Reset the GPU."},
		109: {"Context switch timeout", "Ch 00000010, errorString CTX SWITCH TIMEOUT, Info 0x3c046",
			"The GPU failed to switch contexts in time, which leaves it in an unknown state. Reset the GPU."},
		110: {"Security fault error", "Security fault detected",
			"The security engine reported a fault (SEC_FAULT_ERROR). Reset the GPU."},
		119: {"GSP RPC timeout", "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
			"The GPU System Processor did not answer a driver call in time. The GPU is unusable until it is reset."},
		120: {"GSP error", "GSP kernel exception: load access page fault (cause:0xd) @ pc:0xffffffff9300188a, partition:4#0",
			"The GPU System Processor firmware crashed. Reset the GPU."},
		121: {"C2C link error", "C2C link error on link 0",
			"A chip-to-chip (Grace-Hopper C2C) link reported a corrected error. The catalogue asks for no immediate action."},
		136: {"Link training failure", "ALI training failed on link 2",
			"NVLink training (ALI) failed, so the link is down. Reset the GPU to retrain it."},
		140: {"Unrecoverable ECC error escape", "An unrecoverable ECC error escaped containment",
			"An ECC error escaped the containment mechanisms. Reset the GPU."},
		143: {"GPU initialisation failure", "GPU initialization failure",
			"The GPU failed to initialise (firmware or hardware). Reset it; replace the board if it keeps failing."},
		144: {"NVLink SAW error", "SAW_MVB Fatal XC0 i0 Link 04 (0x00000001 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
			"NVLink5 (Blackwell) SAW block error. The catalogue's NVLink5 workflow decodes the sub-code in the first register; the word after the unit says whether it was fatal."},
		145: {"NVLink RLW error", "RLW_SRC_TRACK Fatal XC0 i1 Link 00 (0x00000001 0x00000002 0x00000000 0x00000000 0x00000000 0x00000000)",
			"NVLink5 (Blackwell) RLW block error. Decode the sub-code with the catalogue's NVLink5 workflow."},
		146: {"NVLink TLW error", "TLW_TX Nonfatal XC0 i0 Link 06 (0x00000010 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
			"NVLink5 (Blackwell) TLW block error. Decode the sub-code with the catalogue's NVLink5 workflow."},
		147: {"NVLink TREX error", "TREX Nonfatal XC0 i0 Link 08 (0x00000002 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
			"NVLink5 (Blackwell) TREX block error. Decode the sub-code with the catalogue's NVLink5 workflow."},
		148: {"NVLink NVLPW control error", "NVLPW_CTRL Fatal XC0 i0 Link 10 (0x00000001 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
			"NVLink5 (Blackwell) NVLPW control error. Decode the sub-code with the catalogue's NVLink5 workflow."},
		149: {"NVLink NETIR error", "NETIR_LINK_EVT Fatal XC0 i0 Link 17 (0x00000004 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
			"NVLink5 (Blackwell) NETIR error, often a link event seen from the fabric side. Decode the sub-code with the catalogue's NVLink5 workflow."},
		150: {"NVLink MSE error", "MSE_WATCHDOG Fatal XC0 i0 Link 00 (0x00000008 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
			"NVLink5 (Blackwell) MSE error. Decode the sub-code with the catalogue's NVLink5 workflow."},
		154: {"GPU recovery action changed", "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
			"The driver states the recovery the GPU now needs, in the text: GPU Reset Required (reset the GPU), Node Reboot Required (reboot), Drain and Reset (drain the node's work first, then reset the GPU), Drain P2P (stop peer-to-peer traffic; reported as investigate). It usually follows the XID that caused it."},
	}
}

// table returns the table, parsed once from catalog.csv and completed with
// handWritten. Callers must not change the slice; Lookup and All hand out
// copies, so that no caller can change what every other part of gpuchaos
// reads. A malformed catalog.csv panics: it is compiled in, and
// TestCatalogue fails on it first.
var table = sync.OnceValue(func() []Info {
	t, err := parseCatalogue(catalogCSV, handWritten())
	if err != nil {
		panic(err)
	}
	return t
})

// parseCatalogue reads catalog.csv: '#' comment lines, a header line, then
// one row per code. Rows come back sorted by code; a code twice, a field
// missing or an action outside our vocabulary is an error.
func parseCatalogue(text string, hand map[int]written) ([]Info, error) {
	r := csv.NewReader(strings.NewReader(text))
	r.Comment = '#'
	r.FieldsPerRecord = 6
	want := []string{"code", "mnemonic", "description", "resolution", "investigatory", "action"}
	head, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("xid catalogue: header: %w", err)
	}
	if strings.Join(head, ",") != strings.Join(want, ",") {
		return nil, fmt.Errorf("xid catalogue: header %q, want %q", head, want)
	}
	var t []Info
	seen := map[int]bool{}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("xid catalogue: %w", err)
		}
		line, _ := r.FieldPos(0)
		code, err := strconv.Atoi(rec[0])
		if err != nil || code <= 0 {
			return nil, fmt.Errorf("xid catalogue: line %d: code %q is not a positive number", line, rec[0])
		}
		if seen[code] {
			return nil, fmt.Errorf("xid catalogue: line %d: code %d appears twice", line, code)
		}
		seen[code] = true
		in := Info{Code: code, Mnemonic: rec[1], Name: rec[2], Resolution: rec[3],
			Investigatory: rec[4], Action: Action(rec[5])}
		if in.Mnemonic == "" || in.Name == "" || in.Resolution == "" {
			return nil, fmt.Errorf("xid catalogue: line %d: code %d lacks a mnemonic, description or resolution", line, code)
		}
		if !in.Action.inTable() {
			return nil, fmt.Errorf("xid catalogue: line %d: code %d: action %q is not one of the table's", line, code, in.Action)
		}
		if w, ok := hand[code]; ok {
			in.Name, in.Text, in.Description = w.name, w.text, w.description
		} else {
			in.Text = in.Name
			if in.Name == "Unused" {
				// The catalogue lists the code as unused by current
				// drivers; the mnemonic says more than "Unused".
				in.Text = in.Mnemonic
			}
			in.Description = catalogueDescription(in)
		}
		t = append(t, in)
	}
	sort.Slice(t, func(i, j int) bool { return t[i].Code < t[j].Code })
	return t, nil
}

// catalogueDescription writes a description for a code we have no words of
// our own for, from what the catalogue says.
func catalogueDescription(in Info) string {
	var b strings.Builder
	if in.Name == "Unused" {
		fmt.Fprintf(&b, "NVIDIA's catalogue lists %s as unused by current drivers", in.Mnemonic)
	} else {
		fmt.Fprintf(&b, "%s (%s) in NVIDIA's catalogue", in.Name, in.Mnemonic)
	}
	if in.Resolution == "UNSPECIFIED" {
		b.WriteString("; it gives no resolution yet, so a person should look.")
	} else {
		fmt.Fprintf(&b, "; its immediate action is %s", in.Resolution)
		if in.Investigatory != "" {
			fmt.Fprintf(&b, ", then %s", in.Investigatory)
		}
		b.WriteString(".")
	}
	return b.String()
}

// inTable reports whether a is an action a table row may carry.
func (a Action) inTable() bool {
	switch a {
	case ActionNone, ActionRestartApp, ActionResetGPU, ActionReboot, ActionInvestigate, ActionSeeText:
		return true
	}
	return false
}

// Lookup returns the table entry for code, and false when the code is not
// in the table.
func Lookup(code int) (Info, bool) {
	t := table()
	i := sort.Search(len(t), func(i int) bool { return t[i].Code >= code })
	if i < len(t) && t[i].Code == code {
		return t[i], true
	}
	return Info{}, false
}

// All returns every entry of the table, sorted by code. The slice is the
// caller's to keep or change.
func All() []Info {
	t := table()
	out := make([]Info, len(t))
	copy(out, t)
	return out
}

// Codes returns every code in the table, sorted.
func Codes() []int {
	t := table()
	codes := make([]int, len(t))
	for i, in := range t {
		codes[i] = in.Code
	}
	return codes
}
