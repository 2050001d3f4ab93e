package twin

import (
	"fmt"
	"math/rand/v2"
	"strconv"
)

// node is one machine of the twin.
type node struct {
	idx    int
	name   string
	rack   string
	domain string // NVLink domain
	// ambient is the inlet temperature; per node so a spec could vary it.
	ambient float64
	labels  map[string]string
	gpus    []*gpu
	mods    nodeMods
	series  nodeSeries
}

// nodeMods are the node's state as the active effects make it.
type nodeMods struct {
	cordoned, drained, pluginKilled, partitioned bool
	netFactor                                    float64 // multiplies inter-node bandwidth
	netDelay                                     float64 // seconds added one way
}

func (m *nodeMods) reset() { *m = nodeMods{netFactor: 1} }

// pciBus is GPU i's bus id in dcgm form. The first eight are the buses of
// a common HGX H100/H200 baseboard as nvidia-smi lists them (GPU 0 at
// 18:00.0); larger boards continue on made-up buses.
func pciBus(i int) string {
	hgx := [8]int{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}
	bus := (0x18 + 0x10*i) & 0xff
	if i < len(hgx) {
		bus = hgx[i]
	}
	return fmt.Sprintf("00000000:%02X:00.0", bus)
}

// build creates nodes, GPUs and jobs from the spec.
func (t *Twin) build() error {
	// UUIDs and variability use their own streams so that adding a job or
	// turning failures on does not reshuffle them.
	idRNG := rand.New(rand.NewPCG(t.seed, 0x75756964))  // "uuid"
	varRNG := rand.New(rand.NewPCG(t.seed, 0x76617279)) // "vary"
	draw, err := variabilitySampler(t.spec.Variability, varRNG)
	if err != nil {
		return err
	}
	for i, ns := range t.spec.Nodes.List {
		model, err := Preset(ns.Model)
		if err != nil {
			return fmt.Errorf("node %s: %w", ns.Name, err)
		}
		m := model // one copy per node; GPUs point at it
		n := &node{idx: i, name: ns.Name, rack: ns.Rack, domain: ns.NVLinkDomain, labels: cloneMap(ns.Labels), ambient: t.spec.AmbientCelsius}
		n.mods.reset()
		perSocket := (ns.GPUs + ns.NUMASockets - 1) / ns.NUMASockets
		for gi := 0; gi < ns.GPUs; gi++ {
			g := &gpu{
				idx: len(t.gpus), node: n, index: gi, model: &m,
				uuid:        uuidFrom(idRNG),
				pci:         pciBus(gi),
				socket:      gi / perSocket,
				variability: draw(),
			}
			g.mods.reset()
			n.gpus = append(n.gpus, g)
			t.gpus = append(t.gpus, g)
		}
		t.nodes = append(t.nodes, n)
		t.byNode[n.name] = n
	}
	next := 0
	for i, js := range t.spec.Jobs {
		j := &job{idx: i, spec: js, pid: 2345 + 100*i}
		for r := 0; r < js.Ranks; r++ {
			g := t.gpus[next]
			next++
			g.job, g.rank = j, r
			j.ranks = append(j.ranks, g)
		}
		if err := t.initJob(j); err != nil {
			return fmt.Errorf("job %s: %w", js.Name, err)
		}
		t.jobs = append(t.jobs, j)
		t.byJob[js.Name] = j
	}
	return nil
}

// uuidFrom draws a GPU UUID in NVIDIA's form, GPU-8-4-4-4-12 hex digits.
func uuidFrom(r *rand.Rand) string {
	a, b := r.Uint64(), r.Uint64()
	h := fmt.Sprintf("%016x%016x", a, b)
	return "GPU-" + h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// deviceName is dcgm-exporter's device label.
func deviceName(index int) string { return "nvidia" + strconv.Itoa(index) }
