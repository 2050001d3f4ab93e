package controller

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gpuchaos/gpuchaos/internal/run/engine"
)

// The controller's own series, served on its --metrics-bind-address beside
// controller-runtime's: what the chart's Grafana dashboard shows of
// experiment verdicts.
var (
	verdictsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuchaos_experiment_verdicts_total",
		Help: "Expectations judged by finished Experiments, by result (pass, late, missed, failed, error, interrupted).",
	}, []string{"namespace", "experiment", "expectation", "detector", "result", "passed"})
	timeToDetect = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "gpuchaos_experiment_time_to_detect_seconds",
		Help: "Time from injection to the first observation that met an expectation, by detector.",
		// From a kernel log line (milliseconds) to an alert with a
		// for: of several minutes.
		Buckets: []float64{0.1, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200},
	}, []string{"detector"})
)

func init() { metrics.Registry.MustRegister(verdictsTotal, timeToDetect) }

// observeVerdicts counts a finished run's verdicts.
func observeVerdicts(namespace, name string, rec *engine.Record) {
	for _, v := range rec.Verdicts {
		det := v.Detector
		if det == "" {
			det = v.Name
		}
		verdictsTotal.WithLabelValues(namespace, name, v.Name, det, v.Verdict, strconv.FormatBool(v.Verdict == engine.Pass)).Inc()
		if v.TTDSeconds != nil {
			timeToDetect.WithLabelValues(det).Observe(*v.TTDSeconds)
		}
	}
}
