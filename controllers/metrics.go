package controllers

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
//   - harnessfacts_runs_finished_total{verdict,adapter,failure_class}: runs
//     that reached a terminal phase, counted once each when the controller
//     first sees them Finished (see observeFinished). verdict is Pass, Fail, Error or None (a cancelled
//     run is not judged); failure_class is Infrastructure, Agent, Timeout,
//     Check or None.
//   - harnessfacts_run_duration_seconds{adapter,verdict}: from the node-agent's
//     claim (status.startTime) to the end (status.completionTime), observed
//     when the run finishes; runs that never started are not observed.
//   - harnessfacts_run_queue_wait_seconds{adapter}: from the run's creation
//     to the node-agent's claim, observed when the run finishes.
type runMetrics struct {
	// started is when this process began counting: a run that finished
	// before it was counted by an earlier controller (or by none).
	started time.Time
	mu      sync.Mutex
	// counted holds the UID of each run counted, until the run is gone.
	counted map[types.NamespacedName]types.UID

	schedulingLatency prometheus.Histogram
	bindingConflicts  prometheus.Counter
	runsFinished      *prometheus.CounterVec
	runDuration       *prometheus.HistogramVec
	queueWait         *prometheus.HistogramVec
}

// forget drops what observeFinished remembers of a deleted run.
func (m *runMetrics) forget(key types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.counted, key)
}

// durationBuckets span a trivial run (seconds) to a long agent episode
// (hours).
var durationBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400}

// observeFinished counts a run marked Finished, once: the first time this
// controller sees it so, whoever set it (the node-agent's outcome or this
// controller). A run whose Finished turned True before this process started
// is not counted: an earlier controller counted it, so a restart does not
// count every finished run again (those that ended while no controller ran
// are not counted at all).
func (m *runMetrics) observeFinished(run *harnessv1.HarnessRun) {
	key := client.ObjectKeyFromObject(run)
	m.mu.Lock()
	if m.counted[key] == run.UID {
		m.mu.Unlock()
		return
	}
	m.counted[key] = run.UID
	m.mu.Unlock()
	// Condition times are kept to the second.
	if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionFinished); c == nil || c.LastTransitionTime.Before(&metav1.Time{Time: m.started.Truncate(time.Second)}) {
		return
	}
	st := &run.Status
	verdict := orNone(string(st.Verdict))
	adapter := orNone(string(run.Spec.Agent.Adapter))
	m.runsFinished.WithLabelValues(verdict, adapter, orNone(string(st.FailureClass))).Inc()
	if st.StartTime == nil {
		return
	}
	if st.CompletionTime != nil {
		m.runDuration.WithLabelValues(adapter, verdict).Observe(max(st.CompletionTime.Sub(st.StartTime.Time).Seconds(), 0))
	}
	m.queueWait.WithLabelValues(adapter).Observe(max(st.StartTime.Sub(run.CreationTimestamp.Time).Seconds(), 0))
}

func orNone(s string) string {
	if s == "" {
		return "None"
	}
	return s
}

var (
	runsDesc = prometheus.NewDesc("harnessfacts_harnessruns",
		"HarnessRuns by phase.", []string{"phase"}, nil)
	pendingDesc = prometheus.NewDesc("harnessfacts_pending_runs",
		"Pending HarnessRuns that fit no node, by reason.", []string{"reason"}, nil)
)

func newRunMetrics(ledger *bindingLedger, reg prometheus.Registerer, started time.Time) (*runMetrics, error) {
	m := &runMetrics{
		started: started,
		counted: map[types.NamespacedName]types.UID{},
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
	m.runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "harnessfacts_runs_finished_total",
		Help: "HarnessRuns that reached a terminal phase, by verdict, adapter and failure class.",
	}, []string{"verdict", "adapter", "failure_class"})
	m.runDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "harnessfacts_run_duration_seconds",
		Help:    "Time from a HarnessRun's claim by its node-agent to its end, by adapter and verdict.",
		Buckets: durationBuckets,
	}, []string{"adapter", "verdict"})
	m.queueWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "harnessfacts_run_queue_wait_seconds",
		Help:    "Time from a HarnessRun's creation to its claim by a node-agent, by adapter.",
		Buckets: []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200},
	}, []string{"adapter"})
	for _, c := range []prometheus.Collector{m.schedulingLatency, m.bindingConflicts, m.runsFinished, m.runDuration, m.queueWait, &stateCollector{ledger: ledger}} {
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
	for _, reason := range []string{PendingNoNodes, PendingNodeSelector, PendingNotReady, PendingNoAdapter, PendingNoVersion, PendingFull, PendingFairShare, PendingSpend, PendingFixture} {
		ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(counts[reason]), reason)
	}
}
