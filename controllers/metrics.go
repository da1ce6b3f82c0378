package controllers

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// runMetrics are the controller's Prometheus metrics.
//
//   - harnessfacts_harnessruns{phase}: runs by phase, counted from the cache
//     index at scrape time.
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

func newRunMetrics(reader client.Reader, ledger *bindingLedger, reg prometheus.Registerer) (*runMetrics, error) {
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
	for _, c := range []prometheus.Collector{m.schedulingLatency, m.bindingConflicts, &stateCollector{reader: reader, ledger: ledger}} {
		if err := reg.Register(c); err != nil {
			are := prometheus.AlreadyRegisteredError{}
			if errors.As(err, &are) {
				return nil, fmt.Errorf("registering controller metrics (a second reconciler on one registry?): %w", err)
			}
			return nil, fmt.Errorf("registering controller metrics: %w", err)
		}
	}
	return m, nil
}

// stateCollector reports the gauges that describe the current state, read
// from the cache index and the ledger when scraped, so they cannot drift.
type stateCollector struct {
	reader client.Reader
	ledger *bindingLedger
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- runsDesc
	ch <- pendingDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, phase := range []harnessv1.RunPhase{harnessv1.RunPending, harnessv1.RunScheduled, harnessv1.RunRunning, harnessv1.RunSucceeded, harnessv1.RunFailed} {
		runs := &harnessv1.HarnessRunList{}
		if err := c.reader.List(context.Background(), runs, client.MatchingFields{IndexRunPhase: string(phase)}, client.UnsafeDisableDeepCopy); err != nil {
			ch <- prometheus.NewInvalidMetric(runsDesc, err)
			continue
		}
		ch <- prometheus.MustNewConstMetric(runsDesc, prometheus.GaugeValue, float64(len(runs.Items)), string(phase))
	}
	counts := c.ledger.pendingCounts()
	for _, reason := range []string{PendingNoNodes, PendingNodeSelector, PendingNotReady, PendingNoAdapter, PendingNoVersion, PendingFull} {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(counts[reason]), reason)
	}
}
