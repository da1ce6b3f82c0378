package nodecmd

import (
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/kubeauth"
	"github.com/harnessfacts/harnessfacts/internal/metricsserver"
)

// MetricsFlags are how a daemon (controller, node-agent) serves its
// Prometheus metrics. Served as kubebuilder's scaffolding serves them: with
// --metrics-secure, HTTPS and kubeauth's check of every caller, so neither
// a pod on the network nor an agent that shares the node's network reads
// them without RBAC's leave.
type MetricsFlags struct {
	addr    string
	secure  bool
	certDir string
}

// Add registers the flags on fl, the address defaulting to defaultAddr.
func (m *MetricsFlags) Add(fl *pflag.FlagSet, defaultAddr string) {
	fl.StringVar(&m.addr, "metrics-bind-address", defaultAddr, "address of the Prometheus metrics endpoint (/metrics); 0 disables it")
	fl.BoolVar(&m.secure, "metrics-secure", true, "serve metrics over HTTPS, only to callers the API server authenticates (TokenReview) and authorizes (SubjectAccessReview: get on the non-resource URL /metrics); false serves plain HTTP to anyone who reaches the address")
	fl.StringVar(&m.certDir, "metrics-cert-dir", "", "folder with tls.crt and tls.key for the metrics endpoint; a self-signed certificate when empty")
}

// BindAddress is --metrics-bind-address ("0": not served).
func (m *MetricsFlags) BindAddress() string { return m.addr }

// Secure is --metrics-secure.
func (m *MetricsFlags) Secure() bool { return m.secure }

// CertDir is --metrics-cert-dir.
func (m *MetricsFlags) CertDir() string { return m.certDir }

// Listen binds the metrics endpoint the flags describe, serving g, for a
// daemon without controller-runtime's manager (the node-agent); with
// --metrics-secure, c asks the API server about each caller. It is nil
// (served by nothing, its Serve waiting for its context) when the flags
// turn it off.
func (m *MetricsFlags) Listen(c *kube.Client, g prometheus.Gatherer, log logr.Logger) (*metricsserver.Server, error) {
	return metricsserver.Listen(metricsserver.Options{BindAddress: m.addr, Secure: m.secure, CertDir: m.certDir,
		Reviewer: &kubeauth.Reviewer{Client: c, Gate: kubeauth.MetricsGate()}, Gatherer: g, Log: log})
}
