package exposition

import (
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// Vec is one family's series keyed by their label values: the series an
// event creates (an XID counted, a fault set) rather than a snapshot. Its
// label names are fixed at NewVec. A Vec is not safe for concurrent use:
// its owner guards it with the lock it builds pages under.
type Vec struct {
	names  []string
	series map[string]*vecSeries
}

type vecSeries struct {
	key    string
	labels []*dto.LabelPair
	value  float64
}

// NewVec returns an empty Vec whose series carry the labels names, in
// that order.
func NewVec(names ...string) *Vec {
	return &Vec{names: names, series: map[string]*vecSeries{}}
}

// key joins label values unambiguously, each quoted: a quoted value ends
// at its first unescaped double quote.
func key(values []string) string {
	var b []byte
	for _, v := range values {
		b = strconv.AppendQuote(b, v)
	}
	return string(b)
}

// get returns the series with values, made at 0 when new. values must
// match the names given to NewVec in number.
func (v *Vec) get(values []string) *vecSeries {
	if len(values) != len(v.names) {
		panic("exposition: Vec got " + strings.Join(values, ",") + " for labels " + strings.Join(v.names, ","))
	}
	k := key(values)
	s, ok := v.series[k]
	if !ok {
		kv := make([]string, 0, 2*len(values))
		for i, n := range v.names {
			kv = append(kv, n, values[i])
		}
		s = &vecSeries{key: k, labels: Labels(kv...)}
		v.series[k] = s
	}
	return s
}

// Add adds d to the series with the label values given.
func (v *Vec) Add(d float64, values ...string) { v.get(values).value += d }

// Set sets the series with the label values given to x.
func (v *Vec) Set(x float64, values ...string) { v.get(values).value = x }

// Delete removes the series with the label values given, if any.
func (v *Vec) Delete(values ...string) { delete(v.series, key(values)) }

// Len returns the number of series.
func (v *Vec) Len() int { return len(v.series) }

// sorted returns the series ordered by label values, so pages are stable.
func (v *Vec) sorted() []*vecSeries {
	out := make([]*vecSeries, 0, len(v.series))
	for _, s := range v.series {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *vecSeries) int { return strings.Compare(a.key, b.key) })
	return out
}
