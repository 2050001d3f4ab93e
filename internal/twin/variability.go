package twin

import (
	_ "embed"
	"encoding/csv"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// palCSV holds per-GPU slowdown factors from the PAL artifact; see
// data/README.md for its source.
//
//go:embed data/pal_32gpu.csv
var palCSV string

// palFactors returns the class column (A–D) of the embedded PAL data.
func palFactors(class string) ([]float64, error) {
	rows, err := csv.NewReader(strings.NewReader(palCSV)).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("read embedded PAL data: %w", err)
	}
	if len(rows) < 2 {
		return nil, fmt.Errorf("read embedded PAL data: no rows")
	}
	col := -1
	for i, h := range rows[0] {
		if h == "PerfVar_class"+class {
			col = i
		}
	}
	if col < 0 {
		return nil, fmt.Errorf("read embedded PAL data: no column for class %s", class)
	}
	out := make([]float64, 0, len(rows)-1)
	for i, r := range rows[1:] {
		v, err := strconv.ParseFloat(r[col], 64)
		if err != nil || !(v > 0) {
			return nil, fmt.Errorf("read embedded PAL data: row %d: bad factor %q", i+1, r[col])
		}
		out = append(out, v)
	}
	return out, nil
}

// variabilitySampler returns a function drawing one GPU's slowdown factor
// (1 = median GPU, larger = slower).
func variabilitySampler(v VariabilitySpec, rng *rand.Rand) (func() float64, error) {
	switch v.Kind {
	case "none":
		return func() float64 { return 1 }, nil
	case "pal":
		fs, err := palFactors(v.Class)
		if err != nil {
			return nil, err
		}
		return func() float64 { return fs[rng.IntN(len(fs))] }, nil
	default:
		sigma := v.Sigma
		return func() float64 { return math.Exp(sigma * rng.NormFloat64()) }, nil
	}
}
