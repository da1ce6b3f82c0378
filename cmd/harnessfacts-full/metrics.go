package main

import (
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kubeclient "github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/kubeauth"
	"github.com/harnessfacts/harnessfacts/internal/nodecmd"
)

// metricsOptions serve the controller's metrics from its manager as the
// flags say, with kubeauth's check of every caller when secure (it does
// what controller-runtime's filter does without linking the API server's
// libraries). The controller-runtime glue lives here, in the controller's
// command, so that the packages the node-agent links need none of it.
func metricsOptions(m *nodecmd.MetricsFlags) metricsserver.Options {
	o := metricsserver.Options{BindAddress: m.BindAddress()}
	if m.Secure() {
		o.SecureServing = true
		o.FilterProvider = metricsFilter
		o.CertDir = m.CertDir()
	}
	return o
}

// metricsFilter is the metrics server's FilterProvider: kubeauth's
// Middleware, over the manager's HTTP client.
func metricsFilter(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	c, err := kubeclient.NewWithHTTPClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: a client for TokenReviews and SubjectAccessReviews: %w", err)
	}
	rv := &kubeauth.Reviewer{Client: c, Gate: kubeauth.MetricsGate()}
	return func(log logr.Logger, next http.Handler) (http.Handler, error) { return rv.Middleware(log, next), nil }, nil
}
