package nodecmd

import (
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
)

// KubeAPIFlags say how the controller and the node-agent reach the API
// server: --kubeconfig, and the client's own rate limit.
//
// The limit defaults to none, as controller-runtime's GetConfig leaves it:
// the API server's priority and fairness is the limit. client-go's own
// default (5 requests a second, bursts of 10), which a config read from a
// kubeconfig file would otherwise keep, held the controller's binding
// writes back under a burst of runs while the in-cluster config did not.
type KubeAPIFlags struct {
	kubeconfig string
	qps        float32
	burst      int
}

// Add registers the flags on fl.
func (k *KubeAPIFlags) Add(fl *pflag.FlagSet) {
	fl.StringVar(&k.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster config or $KUBECONFIG when empty")
	fl.Float32Var(&k.qps, "kube-api-qps", -1, "requests a second this client sends the API server at most; negative: no client-side limit (the API server's priority and fairness limits it), as controller-runtime does")
	fl.IntVar(&k.burst, "kube-api-burst", 0, "requests this client may send at once above --kube-api-qps (with a positive --kube-api-qps); 0: client-go's default (10)")
}

// RestConfig is the client configuration of the flags, from --kubeconfig,
// else $KUBECONFIG or the pod's service account.
func (k KubeAPIFlags) RestConfig() (*rest.Config, error) {
	if k.qps == 0 {
		return nil, fmt.Errorf("--kube-api-qps 0 would let client-go pick its default; give a positive limit, or a negative one for none")
	}
	var cfg *rest.Config
	var err error
	if k.kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", k.kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig %s: %w", k.kubeconfig, err)
		}
	} else if cfg, err = config.GetConfig(); err != nil {
		return nil, fmt.Errorf("finding the cluster (set --kubeconfig or $KUBECONFIG): %w", err)
	}
	cfg.QPS, cfg.Burst = k.qps, k.burst
	return cfg, nil
}
