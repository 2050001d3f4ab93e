package fleet

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestDefaultClassesReproduceLlama3Table5(t *testing.T) {
	t.Parallel()
	// The Table 5 counts, written out again here so that a slip in
	// classes.go shows up as a mismatch rather than being checked against
	// itself.
	want := map[string]float64{
		"faulty-gpu": 148, "hbm3": 72, "software-bug": 54, "network-switch": 35,
		"host-maintenance": 32, "sram": 19, "gsp": 17, "nic": 7, "nccl-watchdog": 7,
		"silent-data-corruption": 6, "thermal-sensor": 6, "other": 16,
	}
	gpuHours := 16384.0 * 54 * 24
	classes := DefaultClasses()
	if len(classes) != len(want) {
		t.Fatalf("DefaultClasses has %d classes, want %d", len(classes), len(want))
	}
	var total float64
	for _, c := range classes {
		n, ok := want[c.Name]
		if !ok {
			t.Errorf("unexpected class %q", c.Name)
			continue
		}
		if got := c.Rate * gpuHours; math.Abs(got-n) > 1e-9 {
			t.Errorf("%s: rate × Llama 3 GPU-hours = %v, want %v", c.Name, got, n)
		}
		if c.Recovery < 0 || c.Recovery > time.Hour {
			t.Errorf("%s: recovery %s outside [0, 1h]", c.Name, c.Recovery)
		}
		total += c.Rate
	}
	if got := total * gpuHours; math.Abs(got-419) > 1e-9 {
		t.Errorf("all classes over the Llama 3 window give %v interruptions, want 419", got)
	}
	// About 1.97e-5 per GPU-hour, the figure DESIGN.md §6 quotes.
	if total < 1.96e-5 || total > 1.98e-5 {
		t.Errorf("total rate %v per GPU-hour, want about 1.97e-5", total)
	}
	rates := DefaultRates()
	for _, c := range classes {
		if rates[c.Name] != c.Rate {
			t.Errorf("DefaultRates[%s] = %v, DefaultClasses says %v", c.Name, rates[c.Name], c.Rate)
		}
	}
	if got := strings.Join(ClassNames(), ","); got != strings.Join(classNames(classes), ",") {
		t.Errorf("ClassNames = %s, not the order of DefaultClasses", got)
	}
}

func TestDefaultClassesAreFreshCopies(t *testing.T) {
	t.Parallel()
	a := DefaultClasses()
	a[0].Rate = 42
	DefaultRates()["hbm3"] = 42
	if DefaultClasses()[0].Rate == 42 || DefaultRates()["hbm3"] == 42 {
		t.Fatal("changing a returned value changed the defaults")
	}
}

func TestWithRates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		rates   map[string]float64
		check   map[string]float64 // class → rate expected afterwards
		wantErr string
	}{
		{name: "override one keeps the rest", rates: map[string]float64{"hbm3": 1e-6},
			check: map[string]float64{"hbm3": 1e-6, "faulty-gpu": 148.0 / (16384 * 54 * 24)}},
		{name: "zero switches a class off", rates: map[string]float64{"software-bug": 0},
			check: map[string]float64{"software-bug": 0}},
		{name: "empty map changes nothing", rates: map[string]float64{},
			check: map[string]float64{"sram": 19.0 / (16384 * 54 * 24)}},
		{name: "unknown class", rates: map[string]float64{"gpu-gremlins": 1e-6}, wantErr: `class "gpu-gremlins" is unknown`},
		{name: "negative", rates: map[string]float64{"hbm3": -1e-6}, wantErr: `class "hbm3": rate -1e-06 is negative`},
		{name: "NaN", rates: map[string]float64{"hbm3": math.NaN()}, wantErr: `class "hbm3": rate NaN is not a finite number`},
		{name: "infinite", rates: map[string]float64{"nic": math.Inf(1)}, wantErr: `class "nic": rate +Inf is not a finite number`},
		{name: "first error in name order", rates: map[string]float64{"zzz": 1, "aaa": 1}, wantErr: `class "aaa"`},
		{name: "over the limit", rates: map[string]float64{"faulty-gpu": 1000}, wantErr: `class "faulty-gpu": rate 1000 per GPU-hour is over the limit of 1`},
		{name: "1e30", rates: map[string]float64{"faulty-gpu": 1e30}, wantErr: `class "faulty-gpu": rate 1e+30 per GPU-hour is over the limit of 1`},
		{name: "at the limit", rates: map[string]float64{"faulty-gpu": 1 - 2e-5}, check: map[string]float64{"faulty-gpu": 1 - 2e-5}},
		{name: "adding up over the limit", rates: map[string]float64{"faulty-gpu": 0.6, "hbm3": 0.6}, wantErr: "the rates of all classes add up to 1.20001 per GPU-hour, over the limit of 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := DefaultClasses()
			got, err := WithRates(in, tt.rates)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range got {
				if want, ok := tt.check[c.Name]; ok && math.Abs(c.Rate-want) > 1e-18 {
					t.Errorf("%s rate = %v, want %v", c.Name, c.Rate, want)
				}
			}
			if in[2].Rate != DefaultClasses()[2].Rate {
				t.Error("WithRates changed its input")
			}
		})
	}
}
