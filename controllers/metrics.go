package controllers

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// runMetrics are the controller's Prometheus metrics.
//
//   - harnessfacts_harnessruns{phase}: runs by phase, as the watch shows them
//     (kept by the ledger).
//   - harnessfacts_scheduling_latency_seconds: from the moment a run waits
//     for a node (this controller first saw it Pending, or it was sent back
//     to Pending) to its successful binding.
//   - harnessfacts_binding_conflicts_total: bindings refused by the API
//     server because the run changed since it was read; each is retried.
//   - harnessfacts_pending_runs{reason}: runs that fit no node, by reason
//     (NoNodes, NodeSelector, NotReady, NoAdapter, NoAdapterVersion, Full).
type runMetrics struct {
	schedulingLatency prometheus.Histogram
	bindingConflicts  prometheus.Counter
}

var (
	runsDesc = prometheus.NewDesc("harnessfacts_harnessruns",
		"HarnessRuns by phase.", []string{"phase"}, nil)
	pendingDesc = prometheus.NewDesc("harnessfacts_pending_runs",
		"Pending HarnessRuns that fit no node, by reason.", []string{"reason"}, nil)
)

func newRunMetrics(ledger *bindingLedger, reg prometheus.Registerer) (*runMetrics, error) {
	m := &runMetrics{
		schedulingLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "harnessfacts_scheduling_latency_seconds",
			Help:    "Time from a HarnessRun waiting for a node to its binding.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600},
		}),
		bindingConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "harnessfacts_binding_conflicts_total",
			Help: "Bindings the API server refused because the HarnessRun changed since it was read.",
		}),
	}
	for _, c := range []prometheus.Collector{m.schedulingLatency, m.bindingConflicts, &stateCollector{ledger: ledger}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering controller metrics (one reconciler per registry): %w", err)
		}
	}
	return m, nil
}

// stateCollector reports the gauges that describe the current state, read
// from the ledger when scraped.
type stateCollector struct {
	ledger *bindingLedger
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runsDesc
	ch <- pendingDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	phases := c.ledger.phaseCounts()
	for _, phase := range []harnessv1.RunPhase{harnessv1.RunPending, harnessv1.RunScheduled, harnessv1.RunRunning, harnessv1.RunSucceeded, harnessv1.RunFailed} {
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(phases[phase]), string(phase))
	}
	counts := c.ledger.pendingCounts()
	for _, reason := range []string{PendingNoNodes, PendingNodeSelector, PendingNotReady, PendingNoAdapter, PendingNoVersion, PendingFull} {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(counts[reason]), reason)
	}
}
