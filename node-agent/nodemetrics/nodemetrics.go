// Package nodemetrics counts, for an SRE's alerts, what the node-agent's runs
// did on its node: runs in flight, and, as each run ends, OOM kills, egress
// denials, disk-limit stops and MCP calls. It reads the runs the node-agent's
// cache already holds (only its own node's), so it adds no API traffic. The
// one figure status cannot tell to the millisecond, the sandbox's start
// latency, it hears from the executor as an executor.Observer.
package nodemetrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	toolscache "k8s.io/client-go/tools/cache"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// The series, each documented in docs/metrics.md.
const (
	RunsInFlight    = "harnessfacts_node_runs_in_flight"
	RunsEnded       = "harnessfacts_node_runs_finished_total"
	OOMKills        = "harnessfacts_node_oom_kills_total"
	EgressDenials   = "harnessfacts_node_egress_denials_total"
	DiskLimitStops  = "harnessfacts_node_disk_limit_stops_total"
	MCPCalls        = "harnessfacts_node_mcp_calls_total"
	SandboxFallback = "harnessfacts_node_sandbox_fallbacks_total"
	SandboxStart    = "harnessfacts_node_sandbox_start_seconds"
)

// Metrics are the node-agent's run metrics.
type Metrics struct {
	inFlight  prometheus.Gauge
	ended     *prometheus.CounterVec
	oom       prometheus.Counter
	denials   prometheus.Counter
	diskStops prometheus.Counter
	mcpCalls  *prometheus.CounterVec
	fallbacks prometheus.Counter
	start     *prometheus.HistogramVec
}

var _ executor.Observer = (*Metrics)(nil)

// Step implements executor.Observer; steps are not counted.
func (m *Metrics) Step(*harnessv1.HarnessRun, string) {}

// AgentStarted implements executor.Observer: the start latency, by sandbox
// mode.
func (m *Metrics) AgentStarted(_ *harnessv1.HarnessRun, mode sandbox.Mode, latency time.Duration) {
	m.start.WithLabelValues(string(mode)).Observe(latency.Seconds())
}

// New registers the metrics with reg (controller-runtime's registry in the
// node-agent, served on its metrics endpoint).
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: RunsInFlight,
			Help: "Runs this node-agent is executing (phase Running on this node)."}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: RunsEnded,
			Help: "Runs that ended on this node, by verdict and reason."}, []string{"verdict", "reason"}),
		oom: prometheus.NewCounter(prometheus.CounterOpts{Name: OOMKills,
			Help: "Runs whose agent the memory limit killed."}),
		denials: prometheus.NewCounter(prometheus.CounterOpts{Name: EgressDenials,
			Help: "Connections the runs' egress proxies refused."}),
		diskStops: prometheus.NewCounter(prometheus.CounterOpts{Name: DiskLimitStops,
			Help: "Runs stopped because their run dir reached limits.disk."}),
		mcpCalls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MCPCalls,
			Help: "MCP get_token calls the runs' token servers answered, by transport."}, []string{"transport"}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{Name: SandboxFallback,
			Help: "Runs whose agent ran unsandboxed because their isolation policy allowed a fallback."}),
		start: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: SandboxStart,
			Help:    "Time from the node-agent's start of an attempt (right after its claim) to the agent's command started in its sandbox: fixture, run dir, credentials, MCP server, egress proxy and the sandbox's own start, by sandbox mode.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120}}, []string{"mode"}),
	}
	for _, c := range []prometheus.Collector{m.inFlight, m.ended, m.oom, m.denials, m.diskStops, m.mcpCalls, m.fallbacks, m.start} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering the node-agent's run metrics: %w", err)
		}
	}
	return m, nil
}

// Handler is the informer event handler that keeps the metrics: the gauge
// follows the runs' phases, the counters move once per run, when an update
// shows it reach a terminal phase (a run already finished when the
// node-agent started is not counted again).
func (m *Metrics) Handler() toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if run, ok := obj.(*harnessv1.HarnessRun); ok && run.Status.Phase == harnessv1.RunRunning {
				m.inFlight.Inc()
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			old, ok1 := oldObj.(*harnessv1.HarnessRun)
			run, ok2 := newObj.(*harnessv1.HarnessRun)
			if !ok1 || !ok2 {
				return
			}
			wasRunning, isRunning := old.Status.Phase == harnessv1.RunRunning, run.Status.Phase == harnessv1.RunRunning
			switch {
			case !wasRunning && isRunning:
				m.inFlight.Inc()
			case wasRunning && !isRunning:
				m.inFlight.Dec()
			}
			if !old.Status.Phase.Terminal() && run.Status.Phase.Terminal() {
				m.observeEnd(run)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if run, ok := obj.(*harnessv1.HarnessRun); ok && run.Status.Phase == harnessv1.RunRunning {
				m.inFlight.Dec()
			}
		},
	}
}

func (m *Metrics) observeEnd(run *harnessv1.HarnessRun) {
	st := &run.Status
	verdict := string(st.Verdict)
	if verdict == "" {
		verdict = "None"
	}
	m.ended.WithLabelValues(verdict, st.Reason).Inc()
	if st.Agent != nil && st.Agent.OOMKilled {
		m.oom.Inc()
	}
	if st.Network != nil && st.Network.Denied > 0 {
		m.denials.Add(float64(st.Network.Denied))
	}
	if st.Reason == harnessv1.ReasonDiskLimitExceeded {
		m.diskStops.Inc()
	}
	if st.MCP != nil && st.MCP.Calls > 0 {
		m.mcpCalls.WithLabelValues(string(st.MCP.Transport)).Add(float64(st.MCP.Calls))
	}
	if st.Sandbox != nil && st.Sandbox.Mode == "plain" {
		m.fallbacks.Inc()
	}
}

// Setup registers the metrics with reg and keeps them from runs, the
// informer of the node-agent's cache that holds only its node's runs.
func Setup(runs toolscache.SharedIndexInformer, reg prometheus.Registerer) (*Metrics, error) {
	m, err := New(reg)
	if err != nil {
		return nil, err
	}
	if _, err := runs.AddEventHandler(m.Handler()); err != nil {
		return nil, fmt.Errorf("watching runs for the node-agent's metrics: %w", err)
	}
	return m, nil
}
