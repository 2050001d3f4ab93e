package exposition

import (
	"slices"

	dto "github.com/prometheus/client_model/go"
)

// Metric types of a family.
const (
	Gauge   = dto.MetricType_GAUGE
	Counter = dto.MetricType_COUNTER
)

// slab is how many samples a Builder allocates at once: one page of 8
// GPUs needs about 150, so a few allocations serve a whole scrape.
const slab = 64

// Builder collects one page's families in the order they are started. The
// zero value is ready to use. A Builder is not safe for concurrent use;
// the families it returns are the caller's (or promhttp's) to encode.
type Builder struct {
	fams []*dto.MetricFamily
	cur  *dto.MetricFamily
	// Samples are carved out of these slabs: three allocations per
	// slab instead of three per sample.
	metrics []dto.Metric
	gauges  []dto.Gauge
	counts  []dto.Counter
	values  []float64
	pairs   []dto.LabelPair
	strs    []string
}

// Family starts a family; the samples added next belong to it. name and
// help are not checked: a name must follow Prometheus' rules. typ is
// Gauge or Counter.
func (b *Builder) Family(name, help string, typ dto.MetricType) {
	b.end()
	b.cur = &dto.MetricFamily{Name: &name, Help: &help, Type: typ.Enum()}
}

// end keeps the current family if it has samples.
func (b *Builder) end() {
	if b.cur != nil && len(b.cur.Metric) > 0 {
		b.fams = append(b.fams, b.cur)
	}
	b.cur = nil
}

// Add appends a sample with labels to the current family. labels are
// shared, not copied: they must not change while the page is in use (the
// agent renders each GPU's set once and shares it across scrapes).
func (b *Builder) Add(labels []*dto.LabelPair, v float64) {
	if b.cur == nil {
		panic("exposition: Add before Family")
	}
	m := next(&b.metrics)
	val := next(&b.values)
	*val = v
	m.Label = labels
	switch b.cur.GetType() {
	case dto.MetricType_COUNTER:
		c := next(&b.counts)
		c.Value = val
		m.Counter = c
	case dto.MetricType_GAUGE:
		g := next(&b.gauges)
		g.Value = val
		m.Gauge = g
	default:
		m.Untyped = &dto.Untyped{Value: val}
	}
	b.cur.Metric = append(b.cur.Metric, m)
}

// AddKV appends a sample whose labels are name, value pairs in the order
// given (a trailing name without a value is dropped). kv is copied: the
// caller may reuse it.
func (b *Builder) AddKV(v float64, kv ...string) {
	n := len(kv) / 2
	if len(b.pairs)+n > cap(b.pairs) {
		b.pairs = make([]dto.LabelPair, 0, max(4*slab, n))
	}
	if len(b.strs)+2*n > cap(b.strs) {
		b.strs = make([]string, 0, max(8*slab, 2*n))
	}
	ps := b.pairs[len(b.pairs) : len(b.pairs)+n]
	b.pairs = b.pairs[:len(b.pairs)+n]
	ss := append(b.strs, kv[:2*n]...)[len(b.strs):]
	b.strs = b.strs[:len(b.strs)+2*n]
	labels := make([]*dto.LabelPair, n)
	for i := range n {
		ps[i].Name, ps[i].Value = &ss[2*i], &ss[2*i+1]
		labels[i] = &ps[i]
	}
	b.Add(labels, v)
}

// Vec appends a family holding every series of v, in the order of their
// label values; an empty Vec adds nothing.
func (b *Builder) Vec(name, help string, typ dto.MetricType, v *Vec) {
	b.Family(name, help, typ)
	for _, e := range v.sorted() {
		b.Add(e.labels, e.value)
	}
}

// Families ends the current family and returns the page: every family
// that got at least one sample, in the order started.
func (b *Builder) Families() []*dto.MetricFamily {
	b.end()
	return b.fams
}

// Labels renders name, value pairs, in the order given, as label pairs to
// share between pages (Add); a trailing name without a value is dropped.
func Labels(kv ...string) []*dto.LabelPair {
	kv = slices.Clone(kv)
	n := len(kv) / 2
	pairs := make([]dto.LabelPair, n)
	out := make([]*dto.LabelPair, n)
	for i := range n {
		pairs[i].Name, pairs[i].Value = &kv[2*i], &kv[2*i+1]
		out[i] = &pairs[i]
	}
	return out
}

// next hands out the next element of a slab, starting a new slab of 64 when
// it is full: elements are never moved, so pointers to them stay valid, and
// a page costs one allocation per 64 samples of each kind.
func next[T any](s *[]T) *T {
	if len(*s) == cap(*s) {
		*s = make([]T, 0, slab)
	}
	*s = (*s)[:len(*s)+1]
	return &(*s)[len(*s)-1]
}
