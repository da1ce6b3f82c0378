package nodecmd

import (
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/kubeauth"
)

// MetricsFlags are how a daemon (controller, node-agent) serves its
// Prometheus metrics.
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

// Options serve the metrics as kubebuilder's scaffolding does: with
// --metrics-secure, HTTPS and an authentication and authorization filter
// (kubeauth's, which does what controller-runtime's does without linking
// the API server's libraries), so neither a pod on the network nor an agent
// that shares the node's network reads them without RBAC's leave.
func (m *MetricsFlags) Options() metricsserver.Options {
	o := metricsserver.Options{BindAddress: m.addr}
	if m.secure {
		o.SecureServing = true
		o.FilterProvider = metricsFilter
		o.CertDir = m.certDir
	}
	return o
}

// metricsFilter is a controller-runtime metrics server's FilterProvider:
// kubeauth's Middleware.
func metricsFilter(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	c, err := kube.NewWithHTTPClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: a client for TokenReviews and SubjectAccessReviews: %w", err)
	}
	rv := &kubeauth.Reviewer{Client: c}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) { return rv.Middleware(log, next), nil }, nil
}
