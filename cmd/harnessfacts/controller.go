package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harnessfacts/harnessfacts/controllers"
)

type controllerFlags struct {
	kubeconfig              string
	metrics                 metricsFlags
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	leaseNamespace          string
	workers                 int
	suiteWorkers            int
	deadlineGrace           time.Duration
	claimTimeout            time.Duration
	defaultLeaseDuration    time.Duration
	development             bool
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
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file; in-cluster config or $KUBECONFIG when empty")
	f.metrics.add(fl, ":8080")
	fl.StringVar(&f.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints")
	fl.BoolVar(&f.leaderElect, "leader-elect", true, "elect a leader so only one replica acts at a time")
	fl.StringVar(&f.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease; the pod's namespace when empty")
	fl.StringVar(&f.leaseNamespace, "node-lease-namespace", "", "namespace of the node-agents' heartbeat Leases; when set, only Leases there are watched")
	fl.IntVar(&f.workers, "workers", 16, "concurrent HarnessRun reconciles (binding stays exact with any number; more workers hide API latency)")
	fl.IntVar(&f.suiteWorkers, "suite-workers", 4, "concurrent HarnessSuite reconciles")
	fl.DurationVar(&f.claimTimeout, "claim-timeout", 2*time.Minute, "time a run may stay Scheduled on a live node before its attempt is taken back (retried like a lost node's)")
	fl.DurationVar(&f.deadlineGrace, "deadline-grace", 30*time.Second, "time past start + limits.episodeSeconds before a run ends with class Timeout")
	fl.DurationVar(&f.defaultLeaseDuration, "default-lease-duration", 40*time.Second, "how long a node Lease without spec.leaseDurationSeconds stays fresh")
	fl.BoolVar(&f.development, "zap-devel", false, "human-readable development logs instead of JSON")
	return cmd
}

func runController(cmd *cobra.Command, f controllerFlags) error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(f.development)))
	cfg, err := restConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	cacheOpts := cache.Options{
		// Managed fields are half of a run's size in memory and the
		// controller never reads them.
		DefaultTransform: cache.TransformStripManagedFields(),
		// Only the fixture ConfigMaps of suites, never the evidence.
		ByObject: controllers.CacheByObject(),
	}
	if f.leaseNamespace != "" {
		cacheOpts.ByObject[&coordinationv1.Lease{}] = cache.ByObject{Namespaces: map[string]cache.Config{f.leaseNamespace: {}}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOpts,
		Metrics:                       f.metrics.options(),
		HealthProbeBindAddress:        f.probeAddr,
		LeaderElection:                f.leaderElect,
		LeaderElectionID:              "harnessfacts-controller",
		LeaderElectionNamespace:       f.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := controllers.Setup(cmd.Context(), mgr, controllers.Options{
		DeadlineGrace:           f.deadlineGrace,
		ClaimTimeout:            f.claimTimeout,
		DefaultLeaseDuration:    f.defaultLeaseDuration,
		MaxConcurrentReconciles: f.workers,
	}, controllers.SuiteOptions{MaxConcurrentReconciles: f.suiteWorkers}); err != nil {
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

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("finding the cluster (set --kubeconfig or $KUBECONFIG): %w", err)
	}
	return cfg, nil
}
