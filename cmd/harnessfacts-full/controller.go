package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/harnessfacts/harnessfacts/controllers"
	kubeclient "github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/nodecmd"
	"github.com/harnessfacts/harnessfacts/runsource"
)

type controllerFlags struct {
	evidenceRepository      string
	kube                    nodecmd.KubeAPIFlags
	metrics                 nodecmd.MetricsFlags
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	leaseNamespace          string
	workers                 int
	suiteWorkers            int
	deadlineGrace           time.Duration
	claimTimeout            time.Duration
	defaultLeaseDuration    time.Duration
	runSource               runSourceFlags
	log                     nodecmd.LogFlags
}

// runSourceFlags configure the server through which node-agents read the
// Secret keys and fixture ConfigMaps of the runs they claimed.
type runSourceFlags struct {
	addr       string
	certDir    string
	bound      []string
	unbound    map[string]string
	namespaces []string
	signingKey string
}

func newControllerCommand() *cobra.Command {
	f := controllerFlags{}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the controller: bind HarnessRuns to node-agents, see each to a terminal phase, and run HarnessSuites",
		Long: `Run the HarnessFacts controller. It binds Pending HarnessRuns to Ready
HarnessNodes, ends runs that overran their deadline or whose node was lost
(retrying infrastructure failures when spec.retries allows), carries out
cancel and delete, and deletes finished runs after ttlSecondsAfterFinished.
It also runs HarnessSuites: each suite's matrix of agents × fixtures ×
repeats becomes HarnessRuns it owns, at most spec.parallelism at a time.

Run it as a Deployment; with --leader-elect (the default) only one replica
acts at a time. Metrics are served in Prometheus format on --metrics-bind-address
(/metrics; HTTPS, only to callers RBAC lets get the non-resource URL /metrics,
unless --metrics-secure=false), health on --health-probe-bind-address
(/healthz, /readyz).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runController(cmd, f)
		},
	}
	fl := cmd.Flags()
	f.kube.Add(fl)
	f.metrics.Add(fl, ":8080")
	fl.StringVar(&f.evidenceRepository, "evidence-repository", "", "OCI repository (registry/path) where each finished run's evidence is pushed as an artifact, kept beyond the run's TTL and suite revisions (status.evidence.storedRef; docs/evidence.md); credentials from the Docker config file at $DOCKER_CONFIG; empty: evidence lives only as long as its run")
	fl.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader so only one replica acts at a time")
	fl.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease; the pod's namespace when empty")
	fl.StringVar(&f.leaseNamespace, "node-lease-namespace", "", "namespace of the node-agents' heartbeat Leases; when set, only Leases there are watched")
	fl.IntVar(&f.workers, "workers", 64, "concurrent HarnessRun reconciles (binding stays exact with any number; more workers hide API latency)")
	fl.IntVar(&f.suiteWorkers, "suite-workers", 4, "concurrent HarnessSuite reconciles")
	fl.DurationVar(&f.claimTimeout, "claim-timeout", 2*time.Minute, "time a run may stay Scheduled on a live node before its attempt is taken back (retried like a lost node's)")
	fl.DurationVar(&f.deadlineGrace, "deadline-grace", 30*time.Second, "time past start + limits.episodeSeconds + its checks' limits.probeSeconds before a run ends with class Timeout")
	fl.DurationVar(&f.defaultLeaseDuration, "default-lease-duration", 40*time.Second, "how long a node Lease without spec.leaseDurationSeconds stays fresh")
	fl.StringVar(&f.runSource.addr, "run-source-bind-address", ":9443", "HTTPS address where node-agents read the Secret keys and fixture ConfigMaps of the runs they claimed (node-agents have no right to read them); \"0\" turns it off, and runs that select a credential or a fixture ConfigMap then fail")
	fl.StringVar(&f.runSource.certDir, "run-source-cert-dir", "", "folder with tls.crt and tls.key of the run source's certificate (re-read when they change); node-agents verify it against their --controller-ca")
	fl.StringSliceVar(&f.runSource.bound, "node-agent-service-account", []string{"harnessfacts-system/harnessfacts-node-agent"}, "NAMESPACE/NAME of the node-agents' service account, whose pod-bound tokens name their node")
	fl.StringToStringVar(&f.runSource.unbound, "node-agent-account", nil, "NAMESPACE/NAME=NODE: a service account that speaks for one node whatever its token is bound to (a node-agent outside a pod)")
	fl.StringVar(&f.runSource.signingKey, "evidence-signing-key-secret", "", "NAMESPACE/NAME of a Secret whose key evidence-key.pem (a PEM ECDSA P-256 private key) signs every receipt instead of the nodes' own keys: served through the run source to the node-agent of an active run's node, never stored on the node; the controller must be able to get it")
	fl.StringSliceVar(&f.runSource.namespaces, "run-namespaces", nil, "the only namespaces whose runs the run source serves (those where the controller may read Secrets); empty: every namespace")
	f.log.Add(fl)
	return cmd
}

// serviceAccountUser is the username of service account NAMESPACE/NAME.
func serviceAccountUser(ref string) (string, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("%q is not NAMESPACE/NAME of a service account", ref)
	}
	return "system:serviceaccount:" + ns + ":" + name, nil
}

// accounts reads the node-agent accounts of the flags.
func (f runSourceFlags) accounts() (runsource.Accounts, error) {
	a := runsource.Accounts{Unbound: map[string]string{}}
	for _, ref := range f.bound {
		u, err := serviceAccountUser(ref)
		if err != nil {
			return a, fmt.Errorf("--node-agent-service-account: %w", err)
		}
		a.Bound = append(a.Bound, u)
	}
	for ref, node := range f.unbound {
		u, err := serviceAccountUser(ref)
		if err != nil || node == "" {
			return a, fmt.Errorf("--node-agent-account %s=%s: want NAMESPACE/NAME=NODE: %w", ref, node, err)
		}
		a.Unbound[u] = node
	}
	return a, nil
}

// signingKeySecret reads --evidence-signing-key-secret; nil when unset.
func (f runSourceFlags) signingKeySecret() (*types.NamespacedName, error) {
	if f.signingKey == "" {
		return nil, nil
	}
	ns, name, ok := strings.Cut(f.signingKey, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--evidence-signing-key-secret %q: want NAMESPACE/NAME", f.signingKey)
	}
	return &types.NamespacedName{Namespace: ns, Name: name}, nil
}

// addRunSource adds the run source's server to mgr.
func addRunSource(mgr ctrl.Manager, f runSourceFlags) error {
	if f.addr == "0" {
		ctrl.Log.WithName("setup").Info("the run source is off (--run-source-bind-address=0): node-agents cannot read runs' Secret keys or fixture ConfigMaps")
		return nil
	}
	if f.certDir == "" {
		return errors.New("--run-source-cert-dir is needed: node-agents send their tokens to the run source only over verified TLS")
	}
	accounts, err := f.accounts()
	if err != nil {
		return err
	}
	signingKey, err := f.signingKeySecret()
	if err != nil {
		return err
	}
	// Straight from the API server, never the manager's cache (see
	// runsource.Options.Reader), over the manager's connections.
	api, err := kubeclient.NewWithHTTPClient(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	srv, err := runsource.NewServer(runsource.Options{
		Reader: api, Reviewer: api, Log: ctrl.Log, Accounts: accounts, Namespaces: f.namespaces,
		Addr: f.addr, CertFile: filepath.Join(f.certDir, "tls.crt"), KeyFile: filepath.Join(f.certDir, "tls.key"),
		SigningKeySecret: signingKey,
	})
	if err != nil {
		return err
	}
	return mgr.Add(srv)
}

func runController(cmd *cobra.Command, f controllerFlags) error {
	f.log.SetLogger()
	cfg, err := f.kube.RestConfig()
	if err != nil {
		return err
	}
	scheme := clusterScheme()
	opts := controllers.ManagerOptions(controllers.ManagerConfig{
		Scheme:                  scheme,
		LeaseNamespace:          f.leaseNamespace,
		LeaderElection:          f.leaderElect,
		LeaderElectionNamespace: f.leaderElectionNamespace,
	})
	opts.Metrics = metricsOptions(&f.metrics)
	opts.HealthProbeBindAddress = f.probeAddr
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// The run source serves the operator's key to the nodes; the store
	// gate checks the receipts it signed against its public part.
	signingKey, err := f.runSource.signingKeySecret()
	if err != nil {
		return err
	}
	if err := controllers.Setup(cmd.Context(), mgr, controllers.Options{
		DeadlineGrace:            f.deadlineGrace,
		ClaimTimeout:             f.claimTimeout,
		DefaultLeaseDuration:     f.defaultLeaseDuration,
		MaxConcurrentReconciles:  f.workers,
		EvidenceRepository:       f.evidenceRepository,
		EvidenceSigningKeySecret: signingKey,
	}, controllers.SuiteOptions{MaxConcurrentReconciles: f.suiteWorkers}); err != nil {
		return err
	}
	if err := addRunSource(mgr, f.runSource); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return err
	}
	// Ready once the informers have synced: before that the controller
	// would judge nodes and slots from an empty cache.
	if err := mgr.AddReadyzCheck("informers-synced", func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), time.Second)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("the informer caches have not synced yet")
		}
		return nil
	}); err != nil {
		return err
	}
	ctx := ctrl.SetupSignalHandler()
	ctrl.Log.WithName("setup").Info("starting the controller", "leaderElection", f.leaderElect, "workers", f.workers)
	return mgr.Start(ctx)
}
