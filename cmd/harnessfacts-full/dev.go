//go:build !windows

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	"github.com/harnessfacts/harnessfacts/config/crd"
	"github.com/harnessfacts/harnessfacts/controllers"
	kubeclient "github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/nodecmd"
	"github.com/harnessfacts/harnessfacts/internal/runflags"
	nodeagent "github.com/harnessfacts/harnessfacts/node-agent"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/runsource"
)

type devFlags struct {
	assets     string
	kubeconfig string
	runRoot    string
	agentCLIs  string
	slots      int32
	node       string
	// evidenceKey signs the receipts, as the node-agent's --evidence-key.
	evidenceKey string
}

func newDevCommand() *cobra.Command {
	f := devFlags{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local control plane, the controller and a node-agent for this machine, in the foreground",
		Long: `Start kube-apiserver and etcd (the binaries hack/control-plane.sh builds), install
the HarnessFacts CRDs, and run the controller and a node-agent for this machine
in this process. A kubeconfig for the control plane is written to --kubeconfig,
so 'kubectl --kubeconfig FILE apply -f run.yaml' runs a HarnessRun for real.
Ctrl-C (or SIGTERM) stops everything and leaves no process behind.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runDev(ctx, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "folder holding kube-apiserver, etcd and kubectl (default $KUBEBUILDER_ASSETS; `make control-plane` prints it)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "harnessfacts-dev.kubeconfig", "where to write the kubeconfig of the local control plane")
	fl.StringVar(&f.runRoot, "run-root", filepath.Join(os.TempDir(), "harnessfacts-dev-runs"), "folder of the run dirs")
	fl.StringVar(&f.evidenceKey, "evidence-key", filepath.Join(os.TempDir(), "harnessfacts-dev-keys", "evidence-key.pem"), "PEM ECDSA P-256 key that signs the receipts (made, mode 0600, when absent; its folder is masked in every sandbox; the HarnessNode publishes its public part); \"\" leaves receipts unsigned")
	fl.StringVar(&f.agentCLIs, "agent-clis", adapters.InstalledCLIDir(), "folder of the agent CLIs' commands (default: where make agent-clis installs them, when it has); empty: PATH")
	fl.Int32Var(&f.slots, "slots", 2, "runs the local node-agent executes at once")
	fl.StringVar(&f.node, "node-name", "", "the local node's name (default: the host name)")
	return cmd
}

func runDev(ctx context.Context, f devFlags) error {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true)))
	logger := ctrl.Log.WithName("dev")
	if f.assets == "" {
		return errors.New("no control plane binaries: pass --assets $(hack/control-plane.sh), or run `make demo`")
	}
	if f.node == "" {
		f.node, _ = os.Hostname()
	}
	crds, err := embeddedCRDs()
	if err != nil {
		return err
	}
	scheme := clusterScheme()
	env := &envtest.Environment{BinaryAssetsDirectory: f.assets, CRDs: crds, Scheme: scheme}
	logger.Info("starting kube-apiserver and etcd", "assets", f.assets)
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		logger.Info("stopping the control plane")
		if err := env.Stop(); err != nil {
			logger.Error(err, "stopping the control plane")
		}
	}()
	user, err := env.ControlPlane.AddUser(envtest.User{Name: "dev-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if err := os.WriteFile(f.kubeconfig, kc, 0o600); err != nil {
		return err
	}
	defer func() { _ = os.Remove(f.kubeconfig) }()

	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	const leaseNS = "harnessfacts-system"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}}); err != nil {
		return err
	}

	// The controller in its manager and the node-agent, as their Deployment
	// and DaemonSet would run them.
	noServe := func(o ctrl.Options) ctrl.Options {
		o.Scheme = scheme
		o.Metrics = metricsserver.Options{BindAddress: "0"}
		o.HealthProbeBindAddress = "0"
		o.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
		return o
	}
	cmgr, err := ctrl.NewManager(cfg, noServe(controllers.ManagerOptions(controllers.ManagerConfig{LeaseNamespace: leaseNS})))
	if err != nil {
		return err
	}
	if err := controllers.Setup(ctx, cmgr, controllers.Options{DeadlineGrace: 30 * time.Second, DefaultLeaseDuration: 40 * time.Second, MaxConcurrentReconciles: 4},
		controllers.SuiteOptions{}); err != nil {
		return err
	}
	controller, err := devRunSource(ctx, cmgr, c, leaseNS, f.node)
	if err != nil {
		return err
	}
	api, err := nodeagent.NewAPI(cfg, f.node)
	if err != nil {
		return err
	}
	// The live output (harnessfacts logs -f) on this machine's loopback.
	live, endpoint, serveLive, err := nodecmd.ServeLiveOutput(ctx, api.Client, "127.0.0.1:0", "127.0.0.1")
	if err != nil {
		return err
	}
	agent, err := nodeagent.Setup(ctx, api, nodeagent.SetupOptions{
		NodeName: f.node, LeaseNamespace: leaseNS, LeaseDuration: 20 * time.Second, Slots: f.slots,
		RunRoot: f.runRoot, Hidden: runflags.DefaultHidden(), Adapters: adapters.New(adapters.Config{CLIDir: f.agentCLIs}),
		EvidenceKey: f.evidenceKey,
		Controller:  controller,
		Live:        live, LiveEndpoint: endpoint,
	})
	if err != nil {
		return err
	}

	// When one part fails, the others stop too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 3)
	go func() { errs <- cmgr.Start(ctx) }()
	go func() { errs <- agent.Start(ctx) }()
	go func() { errs <- serveLive(ctx) }()
	kubectl := filepath.Join(f.assets, "kubectl")
	logger.Info("ready: the local control plane runs HarnessRuns on this machine; Ctrl-C stops everything",
		"kubeconfig", f.kubeconfig, "try", fmt.Sprintf("%s --kubeconfig %s apply -k fixtures/hello && %s --kubeconfig %s apply -f fixtures/hello/run.yaml", kubectl, f.kubeconfig, kubectl, f.kubeconfig))
	var first error
	for range 3 {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

// devNodeAgentAccount is the service account of dev's node-agent.
const devNodeAgentAccount = "harnessfacts-dev-node-agent"

// devRunSource adds the controller's run source to cmgr and returns the
// node-agent's client of it. The node-agent runs in this process, not in a
// pod, so no token can be bound to its pod: it has an account of its own that
// the run source maps to this one node (what --node-agent-account does for
// the controller command), and asks the API server for its tokens. The
// certificate is self-signed, made at every start, and handed to the
// node-agent in memory.
func devRunSource(ctx context.Context, cmgr ctrl.Manager, admin client.Client, namespace, node string) (*runsource.Client, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: devNodeAgentAccount}}
	if err := admin.Create(ctx, sa); err != nil {
		return nil, err
	}
	certPEM, keyPEM, err := runsource.SelfSigned("127.0.0.1")
	if err != nil {
		return nil, err
	}
	tlsCfg, err := runsource.TLSConfig(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	api, err := kubeclient.NewWithHTTPClient(cmgr.GetConfig(), cmgr.GetHTTPClient())
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	srv, err := runsource.NewServer(runsource.Options{
		Reader: api, Reviewer: api, Listener: ln, TLS: tlsCfg, Log: ctrl.Log,
		Accounts: runsource.Accounts{Unbound: map[string]string{"system:serviceaccount:" + namespace + ":" + devNodeAgentAccount: node}},
	})
	if err == nil {
		err = cmgr.Add(srv)
	}
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	return runsource.NewClient("https://"+ln.Addr().String(), certPEM,
		&runsource.RequestedToken{Client: api, ServiceAccount: client.ObjectKeyFromObject(sa)})
}

// embeddedCRDs are the generated CRDs compiled into this binary.
func embeddedCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	err := fs.WalkDir(crd.Bases, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		b, err := fs.ReadFile(crd.Bases, p)
		if err != nil {
			return err
		}
		def := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(b, def); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, def)
		return nil
	})
	return out, err
}
