package cli

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpuchaos/gpuchaos/internal/twin/fleet"
)

func newTwinCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "twin",
		Short: "Run the digital twin of a GPU fleet",
		Long: `Work with gpuchaos's digital twin: a simulated GPU cluster on a virtual
clock, so days of fleet time run in milliseconds.`,
		Example: `  gpuchaos twin simulate --gpus 16384 --days 54`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newTwinSimulateCmd())
	cmd.AddCommand(newTwinServeCmd())
	return cmd
}

// twinSimulateFlags are the flags of 'twin simulate', kept together so the
// checks below can name each one.
type twinSimulateFlags struct {
	format      format
	gpus        int
	gpusPerNode int
	days        float64
	seed        uint64
	model       string
	interval    time.Duration
	cost        time.Duration
	async       bool
	asyncStall  time.Duration
	restart     time.Duration
	ratesFile   string
}

// maxDays keeps the window well inside time.Duration's 292 years.
const maxDays = 100 * 365

func newTwinSimulateCmd() *cobra.Command {
	var fl twinSimulateFlags
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Simulate a fleet-wide training job under random GPU failures",
		Long: `Simulate one synchronous data-parallel training job spanning the whole
fleet for --days, as Llama 3 405B pre-training spanned 16,384 H100 GPUs:
any failure stops every rank, the job restarts and resumes from its last
checkpoint, and the work since then is lost.

Failures arrive at random per GPU-hour by class. The default rates are the
Llama 3 interruption counts (419 in 54 days on 16,384 H100, about 2e-5 per
GPU-hour) split by root cause; --rates FILE replaces the rates of the
classes it names (YAML or JSON, class: rate per GPU-hour, at most ` + strconv.FormatFloat(fleet.MaxRate, 'g', -1, 64) + ` in
all). A run may expect at most ` + thousands(fleet.MaxInterruptions) + ` interruptions (rates × GPUs ×
hours). Classes:
` + wrapList(fleet.ClassNames(), "  ", 72) + `

Prints interruptions by class, the measured mean time between
interruptions, goodput, effective training time ratio (ETTR), lost
GPU-hours by cause, and Young's checkpoint interval √(2 · stall · MTBF).
The same --seed gives the same run.`,
		Example: `  gpuchaos twin simulate --gpus 16384 --days 54
  gpuchaos twin simulate --gpus 65536 --days 30 --checkpoint-interval 15m --async
  gpuchaos twin simulate --gpus 16384 --days 30 --rates examples/twin/rates.yaml --format json | jq .ettr`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := fl.options()
			if err != nil {
				return err
			}
			res, err := fleet.Simulate(cmd.Context(), opts)
			if errors.Is(err, fleet.ErrInvalidOptions) {
				return err
			}
			if err != nil {
				return failed(err)
			}
			if fl.format == "json" {
				return writeJSON(cmd.OutOrStdout(), newTwinSimulateJSON(fl, res))
			}
			return printTwinSimulate(cmd.OutOrStdout(), fl, res)
		},
	}
	addFormatFlag(cmd, &fl.format)
	f := cmd.Flags()
	f.IntVar(&fl.gpus, "gpus", 16384, "GPUs the job spans (at most "+thousands(fleet.MaxGPUs)+")")
	f.IntVar(&fl.gpusPerNode, "gpus-per-node", fleet.DefaultGPUsPerNode, "GPUs per node (at most "+strconv.Itoa(fleet.MaxGPUsPerNode)+")")
	f.Float64Var(&fl.days, "days", 54, "simulated days")
	f.Uint64Var(&fl.seed, "seed", 1, "random seed; the same seed gives the same run")
	f.StringVar(&fl.model, "model", fleet.DefaultModel, "GPU model: "+joinOr(fleet.Models()))
	f.DurationVar(&fl.interval, "checkpoint-interval", fleet.DefaultCheckpointInterval, "running time between checkpoints")
	f.DurationVar(&fl.cost, "checkpoint-cost", fleet.DefaultCheckpointCost, "time to write one checkpoint (the stall, unless --async)")
	f.BoolVar(&fl.async, "async", false, "asynchronous checkpoints: stall only for the snapshot, write in the background")
	f.DurationVar(&fl.asyncStall, "async-stall", 0, "stall of an asynchronous checkpoint (default checkpoint cost × 6/149)")
	f.DurationVar(&fl.restart, "restart-cost", fleet.DefaultRestartCost, "down time of every interruption before class recovery")
	f.StringVar(&fl.ratesFile, "rates", "", "YAML or JSON file of class: rate per GPU-hour, overriding the defaults (at most "+strconv.FormatFloat(fleet.MaxRate, 'g', -1, 64)+" per GPU-hour in all)")
	return cmd
}

// options checks every flag, naming it, and builds the simulation options.
// The fleet package treats zero durations as "use the default"; here a zero
// the user typed is an error rather than silently replaced.
func (fl twinSimulateFlags) options() (fleet.Options, error) {
	switch {
	case fl.gpus <= 0:
		return fleet.Options{}, fmt.Errorf("--gpus: must be positive, got %d", fl.gpus)
	case fl.gpus > fleet.MaxGPUs:
		return fleet.Options{}, fmt.Errorf("--gpus: at most %s, got %d", thousands(fleet.MaxGPUs), fl.gpus)
	case fl.gpusPerNode <= 0:
		return fleet.Options{}, fmt.Errorf("--gpus-per-node: must be positive, got %d", fl.gpusPerNode)
	case fl.gpusPerNode > fleet.MaxGPUsPerNode:
		return fleet.Options{}, fmt.Errorf("--gpus-per-node: at most %d, got %d", fleet.MaxGPUsPerNode, fl.gpusPerNode)
	case math.IsNaN(fl.days) || fl.days <= 0 || fl.days > maxDays:
		return fleet.Options{}, fmt.Errorf("--days: must be in (0, %d], got %v", maxDays, fl.days)
	case !slices.Contains(fleet.Models(), fl.model):
		return fleet.Options{}, fmt.Errorf("--model: %q is not one of %s", fl.model, joinOr(fleet.Models()))
	case fl.interval <= 0:
		return fleet.Options{}, fmt.Errorf("--checkpoint-interval: must be positive, got %s", fl.interval)
	case fl.cost <= 0:
		return fleet.Options{}, fmt.Errorf("--checkpoint-cost: must be positive, got %s", fl.cost)
	case fl.asyncStall < 0:
		return fleet.Options{}, fmt.Errorf("--async-stall: must not be negative, got %s", fl.asyncStall)
	case fl.asyncStall > 0 && !fl.async:
		return fleet.Options{}, errors.New("--async-stall: only applies with --async")
	case fl.restart <= 0:
		return fleet.Options{}, fmt.Errorf("--restart-cost: must be positive, got %s", fl.restart)
	}
	classes := fleet.DefaultClasses()
	if fl.ratesFile != "" {
		rates, err := fleet.LoadRates(fl.ratesFile)
		if err != nil {
			return fleet.Options{}, fmt.Errorf("--rates: %w", err)
		}
		if classes, err = fleet.WithRates(classes, rates); err != nil {
			return fleet.Options{}, fmt.Errorf("--rates: %s: %w", fl.ratesFile, err)
		}
	}
	window := time.Duration(fl.days * float64(24*time.Hour))
	if n := fleet.ExpectedInterruptions(classes, fl.gpus, window); n > fleet.MaxInterruptions {
		total := 0.0
		for _, c := range classes {
			total += c.Rate
		}
		return fleet.Options{}, fmt.Errorf("--days: %s days of %s GPUs at %.3g interruptions per GPU-hour expect %s interruptions, over the limit of %s; lower --days, --gpus or the --rates",
			strconv.FormatFloat(fl.days, 'f', -1, 64), thousands(float64(fl.gpus)), total, thousands(n), thousands(fleet.MaxInterruptions))
	}
	return fleet.Options{
		GPUs:               fl.gpus,
		GPUsPerNode:        fl.gpusPerNode,
		Duration:           window,
		Seed:               fl.seed,
		Model:              fl.model,
		Classes:            classes,
		CheckpointInterval: fl.interval,
		CheckpointCost:     fl.cost,
		Async:              fl.async,
		AsyncStall:         fl.asyncStall,
		RestartCost:        fl.restart,
	}, nil
}

// twinSimulateJSON is the JSON form of a run: inputs echoed, then results.
// Durations are seconds unless a key says otherwise; the two intervals a
// reader compares are also given as Go durations.
type twinSimulateJSON struct {
	GPUs        int                `json:"gpus"`
	GPUsPerNode int                `json:"gpus_per_node"`
	Nodes       int                `json:"nodes"`
	Model       string             `json:"model"`
	Days        float64            `json:"days"`
	Seed        uint64             `json:"seed"`
	RatesFile   string             `json:"rates_file,omitempty"`
	Rates       map[string]float64 `json:"rates"`

	CheckpointInterval        string  `json:"checkpoint_interval"`
	CheckpointIntervalSeconds float64 `json:"checkpoint_interval_seconds"`
	CheckpointCostSeconds     float64 `json:"checkpoint_cost_seconds"`
	CheckpointAsync           bool    `json:"checkpoint_async"`
	CheckpointStallSeconds    float64 `json:"checkpoint_stall_seconds"`
	RestartCostSeconds        float64 `json:"restart_cost_seconds"`

	InterruptionsTotal         int            `json:"interruptions_total"`
	InterruptionsDuringRestart int            `json:"interruptions_during_restart"`
	InterruptionsByClass       map[string]int `json:"interruptions_by_class"`
	NodesHit                   int            `json:"nodes_hit"`
	Checkpoints                int            `json:"checkpoints"`
	// MTBFHours is null when nothing failed.
	MTBFHours                        *float64 `json:"mtbf_hours"`
	ExpectedMTBFHours                float64  `json:"expected_mtbf_hours"`
	CheckpointIntervalOptimal        string   `json:"checkpoint_interval_optimal"`
	CheckpointIntervalOptimalSeconds float64  `json:"checkpoint_interval_optimal_seconds"`

	Goodput             float64            `json:"goodput"`
	ETTR                float64            `json:"ettr"`
	WallHours           float64            `json:"wall_hours"`
	ProductiveHours     float64            `json:"productive_hours"`
	LostGPUHours        float64            `json:"lost_gpu_hours"`
	LostGPUHoursByCause map[string]float64 `json:"lost_gpu_hours_by_cause"`
	Notes               []string           `json:"notes,omitempty"`
}

func newTwinSimulateJSON(fl twinSimulateFlags, r fleet.Result) twinSimulateJSON {
	o := r.Options
	stall := o.CheckpointCost
	if o.Async {
		stall = o.AsyncStall
	}
	rates := make(map[string]float64, len(o.Classes))
	for _, c := range o.Classes {
		rates[c.Name] = c.Rate
	}
	out := twinSimulateJSON{
		GPUs:                             o.GPUs,
		GPUsPerNode:                      o.GPUsPerNode,
		Nodes:                            twinNodes(o),
		Model:                            o.Model,
		Days:                             fl.days,
		Seed:                             o.Seed,
		RatesFile:                        fl.ratesFile,
		Rates:                            rates,
		CheckpointInterval:               o.CheckpointInterval.String(),
		CheckpointIntervalSeconds:        o.CheckpointInterval.Seconds(),
		CheckpointCostSeconds:            o.CheckpointCost.Seconds(),
		CheckpointAsync:                  o.Async,
		CheckpointStallSeconds:           stall.Seconds(),
		RestartCostSeconds:               o.RestartCost.Seconds(),
		InterruptionsTotal:               r.Interruptions,
		InterruptionsDuringRestart:       r.InterruptionsDuringRestart,
		InterruptionsByClass:             r.ByClass,
		NodesHit:                         r.NodesHit,
		Checkpoints:                      r.Checkpoints,
		ExpectedMTBFHours:                r.ExpectedMTBF.Hours(),
		CheckpointIntervalOptimal:        r.YoungInterval.String(),
		CheckpointIntervalOptimalSeconds: r.YoungInterval.Seconds(),
		Goodput:                          r.Goodput,
		ETTR:                             r.ETTR,
		WallHours:                        r.Wall.Hours(),
		ProductiveHours:                  r.Productive.Hours(),
		LostGPUHours:                     r.LostGPUHours.Total,
		LostGPUHoursByCause: map[string]float64{
			"lost_work":  r.LostGPUHours.Work,
			"restart":    r.LostGPUHours.Restart,
			"checkpoint": r.LostGPUHours.Checkpoint,
		},
		Notes: r.Notes,
	}
	if r.Interruptions > 0 {
		h := r.MTBF.Hours()
		out.MTBFHours = &h
	}
	return out
}

func twinNodes(o fleet.Options) int {
	return (o.GPUs + o.GPUsPerNode - 1) / o.GPUsPerNode
}

func printTwinSimulate(w io.Writer, fl twinSimulateFlags, r fleet.Result) error {
	o := r.Options
	mode, stall := "synchronous", o.CheckpointCost
	if o.Async {
		mode, stall = "asynchronous", o.AsyncStall
	}
	var total float64
	for _, c := range o.Classes {
		total += c.Rate
	}
	rates := "default (Llama 3 on 16,384 H100)"
	if fl.ratesFile != "" {
		rates = "from " + fl.ratesFile
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "Fleet:\t%s × %s GPUs (%s nodes of %d), %s days, seed %d\n",
		thousands(float64(o.GPUs)), o.Model, thousands(float64(twinNodes(o))), o.GPUsPerNode,
		strconv.FormatFloat(fl.days, 'f', -1, 64), o.Seed)
	fmt.Fprintf(tw, "Failure rates:\t%s, %.3g per GPU-hour in all\n", rates, total)
	ckpt := fmt.Sprintf("every %s, %s, %s stall", o.CheckpointInterval, mode, stall)
	if o.Async {
		ckpt += fmt.Sprintf(", %s background write", o.CheckpointCost)
	}
	fmt.Fprintf(tw, "Checkpoints:\t%s; restart %s\n", ckpt, o.RestartCost)
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(w, "\nInterruptions: %d (%d while already restarting), on %d distinct nodes\n",
		r.Interruptions, r.InterruptionsDuringRestart, r.NodesHit)
	type row struct {
		name string
		n    int
	}
	rows := make([]row, 0, len(r.ByClass))
	for name, n := range r.ByClass {
		rows = append(rows, row{name, n})
	}
	slices.SortFunc(rows, func(a, b row) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.name, b.name)
	})
	width := len("CLASS")
	for _, x := range rows {
		width = max(width, len(x.name))
	}
	fmt.Fprintf(w, "  %-*s  %5s  %6s\n", width, "CLASS", "COUNT", "SHARE")
	for _, x := range rows {
		share := 0.0
		if r.Interruptions > 0 {
			share = 100 * float64(x.n) / float64(r.Interruptions)
		}
		fmt.Fprintf(w, "  %-*s  %5d  %5.1f%%\n", width, x.name, x.n, share)
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	mtbf := "none measured (no interruptions)"
	if r.Interruptions > 0 {
		mtbf = fmt.Sprintf("%.2f h", r.MTBF.Hours())
	}
	if r.ExpectedMTBF > 0 {
		mtbf += fmt.Sprintf(" (expected %.2f h)", r.ExpectedMTBF.Hours())
	}
	fmt.Fprintf(tw, "MTBF:\t%s\n", mtbf)
	fmt.Fprintf(tw, "Goodput:\t%.1f%%\n", 100*r.Goodput)
	fmt.Fprintf(tw, "ETTR:\t%.1f%% (%.0f of %.0f hours kept)\n", 100*r.ETTR, r.Productive.Hours(), r.Wall.Hours())
	l := r.LostGPUHours
	fmt.Fprintf(tw, "Lost GPU-hours:\t%s (lost work %s, restarts %s, checkpoint stalls %s)\n",
		thousands(l.Total), thousands(l.Work), thousands(l.Restart), thousands(l.Checkpoint))
	if r.YoungInterval > 0 {
		fmt.Fprintf(tw, "Young's interval:\t%s for a %s stall (this run: %s)\n", r.YoungInterval, stall, o.CheckpointInterval)
	} else {
		fmt.Fprintf(tw, "Young's interval:\tnone (nothing can fail)\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(tw, "Note:\t%s\n", n)
	}
	return tw.Flush()
}

// wrapList joins items with commas into indented lines of at most width
// columns, for lists in help text.
func wrapList(items []string, indent string, width int) string {
	var b strings.Builder
	line := indent
	for i, it := range items {
		if i < len(items)-1 {
			it += ","
		}
		if line != indent && len(line)+1+len(it) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += it
	}
	b.WriteString(line)
	return b.String()
}

// thousands formats a non-negative quantity rounded to a whole number with
// comma separators, for GPU and GPU-hour counts that run into millions.
func thousands(x float64) string {
	s := strconv.FormatFloat(math.Round(x), 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
