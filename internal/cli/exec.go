package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/api/v1alpha1"
	"github.com/gpuchaos/gpuchaos/internal/cli/command"
	"github.com/gpuchaos/gpuchaos/internal/gputools/launch"
	"github.com/gpuchaos/gpuchaos/internal/model/catalog"
)

// Exit codes of a command that could not be started, as POSIX shells use
// them, so scripts read gpuchaos exec's failures as they read a shell's.
const (
	exitNotFound      = 127
	exitCannotExecute = 126
)

func newExecCmd() *cobra.Command {
	var (
		faultID string
		params  []string
		quiet   bool
		dryRun  bool
		list    bool
		f       format
	)
	cmd := &cobra.Command{
		Use:   "exec --fault ID [--param KEY=VALUE]... -- COMMAND [ARGS...]",
		Short: "Run a workload under an NCCL environment fault",
		Long: `Run COMMAND (directly, no shell) with the environment variables an
environment fault sets laid over the inherited environment: the fault's
variables replace inherited ones of the same name, everything else passes
through. The fault is reverted by relaunching the workload without gpuchaos
exec. The faults are those with an 'env' mechanism in the catalogue
('gpuchaos exec --list' shows them and the variables they set).

gpuchaos exec forwards SIGINT, SIGTERM and SIGHUP to the command's process
group and exits with the command's exit status (128+N when signal N killed
it; 127 when it is not found, 126 when it cannot be run). If gpuchaos exec
itself is killed, even with SIGKILL, the kernel kills the command too
(parent-death signal); processes the command started in sessions of their
own, as torchrun does for its ranks, are the command's to clean up.

One line on stderr names what was set, unless --quiet. --dry-run prints the
change to the environment (variable, new value, inherited value) and runs
nothing.`,
		Example: `  gpuchaos exec --fault nccl.p2p-off -- torchrun --nproc-per-node 2 train.py
  gpuchaos exec --fault nccl.proto --param proto=LL128 -- python3 bench.py
  gpuchaos exec --fault nccl.socket-fallback --dry-run --format json
  gpuchaos exec --list`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if list {
				if faultID != "" || len(args) > 0 || dryRun {
					return errors.New("exec: --list takes no --fault, --dry-run or command")
				}
				return writeExecFaults(cmd.OutOrStdout(), f)
			}
			if faultID == "" {
				return errors.New("exec: --fault is required (gpuchaos exec --fault ID -- COMMAND [ARGS...]; 'gpuchaos exec --list' shows the faults)")
			}
			if len(args) == 0 && !dryRun {
				return fmt.Errorf("exec: no command to run (gpuchaos exec --fault %s -- COMMAND [ARGS...])", faultID)
			}
			if f == "json" && !dryRun {
				return errors.New("exec: --format json applies to --dry-run and --list only")
			}
			fault, vals, env, err := resolveExecFault(faultID, params)
			if err != nil {
				return err
			}
			delta := newExecDelta(fault, vals, env, args, os.LookupEnv)
			if dryRun {
				return writeExecDelta(cmd.OutOrStdout(), f, delta)
			}
			if !quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "gpuchaos: %s\n", delta.banner())
			}
			// Signals are the command's to answer: launch forwards them and
			// this process waits for the command's own exit. Main's context
			// ends on the first SIGINT or SIGTERM, which would otherwise
			// escalate to SIGKILL after a grace the workload did not ask
			// for (torchrun's own shutdown of its ranks can take longer).
			st, err := launch.Run(context.WithoutCancel(cmd.Context()), launch.Options{
				Args: args, Env: env,
				Stdin: cmd.InOrStdin(), Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(),
			})
			if err != nil {
				code := exitCannotExecute
				if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
					code = exitNotFound
				}
				if st.Pid != 0 {
					code = 1 // it ran, but its output could not be copied
				}
				return command.Exit(code, fmt.Errorf("exec: %w", err))
			}
			if st.Code != 0 {
				return command.Exit(st.Code, fmt.Errorf("exec: %s %s (under %s)", args[0], st, fault.ID))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	// Flags end at the command: its own flags (torchrun --nproc-per-node)
	// are not gpuchaos's, with or without the "--".
	fl.SetInterspersed(false)
	fl.StringVar(&faultID, "fault", "", "environment fault to apply (see --list)")
	fl.StringArrayVar(&params, "param", nil, "fault parameter as KEY=VALUE (repeatable)")
	fl.BoolVarP(&quiet, "quiet", "q", false, "do not print the line naming what was set")
	fl.BoolVar(&dryRun, "dry-run", false, "print the environment change and run nothing")
	fl.BoolVar(&list, "list", false, "list the environment faults and the variables they set")
	addFormatFlag(cmd, &f)
	return cmd
}

// execEnvMechanism returns the fault's mechanism that sets environment
// variables, or nil.
func execEnvMechanism(f *catalog.Fault) *catalog.Mechanism {
	for i := range f.Mechanisms {
		if f.Mechanisms[i].Env != nil {
			return &f.Mechanisms[i]
		}
	}
	return nil
}

// execEnvFaults are the catalogue's faults that exec can apply, in catalogue
// order.
func execEnvFaults() []*catalog.Fault {
	var out []*catalog.Fault
	for _, f := range catalog.All() {
		if execEnvMechanism(f) != nil {
			out = append(out, f)
		}
	}
	return out
}

func execEnvFaultIDs() string {
	var ids []string
	for _, f := range execEnvFaults() {
		ids = append(ids, f.ID)
	}
	return strings.Join(ids, ", ")
}

// resolveExecFault checks the fault id and its parameters against the
// catalogue and returns the variables to set.
func resolveExecFault(id string, rawParams []string) (*catalog.Fault, catalog.Values, []string, error) {
	fault, ok := catalog.Lookup(id)
	if !ok {
		return nil, nil, nil, fmt.Errorf("exec: --fault: %s", catalog.CheckSpec(v1alpha1.FaultSpec{ID: id}).Msg)
	}
	mech := execEnvMechanism(fault)
	if mech == nil {
		var names []string
		for _, m := range fault.Mechanisms {
			names = append(names, m.Name)
		}
		return nil, nil, nil, fmt.Errorf("exec: --fault: %s has no env mechanism (its mechanisms: %s); exec runs %s",
			fault.ID, strings.Join(names, ", "), execEnvFaultIDs())
	}
	raw, err := parseExecParams(rawParams)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("exec: %w", err)
	}
	if len(fault.Params) == 0 && len(raw) > 0 {
		return nil, nil, nil, fmt.Errorf("exec: --param %s: %s takes no parameters", rawParams[0], fault.ID)
	}
	vals, err := fault.Resolve(raw)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("exec: --param %w", err)
	}
	return fault, vals, mech.Env(vals), nil
}

// parseExecParams reads repeated --param KEY=VALUE flags. The value is taken
// as it is, '=' and spaces included; the catalogue parses it by type.
func parseExecParams(kvs []string) (map[string]string, error) {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("--param %q: want KEY=VALUE", kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("--param %s: given twice", k)
		}
		out[k] = v
	}
	return out, nil
}

// execEnvChange is one variable a fault sets, with what the environment held.
type execEnvChange struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Inherited is the value the variable has now, nil when unset.
	Inherited *string `json:"inherited"`
}

// execDelta is what exec changes: the JSON of --dry-run.
type execDelta struct {
	Fault   string          `json:"fault"`
	Params  catalog.Values  `json:"params"`
	Set     []execEnvChange `json:"set"`
	Command []string        `json:"command"`
}

func newExecDelta(f *catalog.Fault, vals catalog.Values, env, args []string, lookup func(string) (string, bool)) execDelta {
	d := execDelta{Fault: f.ID, Params: vals, Command: args, Set: []execEnvChange{}}
	if d.Command == nil {
		d.Command = []string{}
	}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		c := execEnvChange{Name: name, Value: value}
		if old, ok := lookup(name); ok {
			c.Inherited = &old
		}
		d.Set = append(d.Set, c)
	}
	return d
}

// banner is the one line exec prints before it runs the command.
func (d execDelta) banner() string {
	var set, replaced []string
	for _, c := range d.Set {
		set = append(set, c.Name+"="+c.Value)
		if c.Inherited != nil && *c.Inherited != c.Value {
			replaced = append(replaced, c.Name+"="+*c.Inherited)
		}
	}
	line := "exec with " + strings.Join(set, " ") + " (" + d.Fault
	if len(replaced) > 0 {
		line += "; replaces inherited " + strings.Join(replaced, " ")
	}
	return line + ")"
}

func writeExecDelta(w io.Writer, f format, d execDelta) error {
	if f == "json" {
		return writeJSON(w, d)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s sets:\n", d.Fault)
	for _, c := range d.Set {
		was := "unset now"
		switch {
		case c.Inherited == nil:
		case *c.Inherited == c.Value:
			was = "already " + c.Value
		default:
			was = fmt.Sprintf("now %q", *c.Inherited)
		}
		fmt.Fprintf(tw, "  %s=%s\t(%s)\n", c.Name, c.Value, was)
	}
	if len(d.Command) > 0 {
		fmt.Fprintf(tw, "command: %s\n", strings.Join(d.Command, " "))
	}
	return tw.Flush()
}

// execEnvFaultInfo is one row of --list --format json.
type execEnvFaultInfo struct {
	ID      string          `json:"id"`
	Summary string          `json:"summary"`
	Env     []string        `json:"env"`
	Params  []catalog.Param `json:"params"`
}

// writeExecFaults lists the environment faults with the variables they set
// at their default parameters.
func writeExecFaults(w io.Writer, f format) error {
	var rows []execEnvFaultInfo
	for _, x := range execEnvFaults() {
		vals, err := x.Resolve(nil)
		if err != nil {
			return failed(fmt.Errorf("exec --list: defaults of %s: %w", x.ID, err))
		}
		params := slices.Clone(x.Params)
		if params == nil {
			params = []catalog.Param{}
		}
		rows = append(rows, execEnvFaultInfo{ID: x.ID, Summary: x.Summary, Env: execEnvMechanism(x).Env(vals), Params: params})
	}
	if f == "json" {
		return writeJSON(w, rows)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tSETS (defaults)\tPARAMS")
	for _, r := range rows {
		var ps []string
		for _, p := range r.Params {
			s := p.Name + "=" + p.Default
			switch {
			case len(p.Enum) > 0:
				s += " (" + strings.Join(p.Enum, "|") + ")"
			case p.Min != "" || p.Max != "":
				s += " [" + p.Min + ", " + p.Max + "]"
			}
			ps = append(ps, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.ID, strings.Join(r.Env, " "), strings.Join(ps, "; "))
	}
	return tw.Flush()
}
