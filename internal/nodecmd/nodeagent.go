package nodecmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager/signals"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/internal/metricsserver"
	"github.com/harnessfacts/harnessfacts/internal/pid1"
	"github.com/harnessfacts/harnessfacts/internal/runflags"
	nodeagent "github.com/harnessfacts/harnessfacts/node-agent"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/egress"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixturesource"
	"github.com/harnessfacts/harnessfacts/node-agent/livelog"
	"github.com/harnessfacts/harnessfacts/node-agent/nodemetrics"
	"github.com/harnessfacts/harnessfacts/runsource"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// controllerLink says how a node-agent reaches the controller's run source.
type controllerLink struct {
	url        string
	serverName string
	ca         string
	token      string
}

type nodeAgentFlags struct {
	kube              KubeAPIFlags
	nodeName          string
	leaseNamespace    string
	leaseDuration     time.Duration
	slots             int32
	runRoot           string
	imageCache        string
	fixtureCache      string
	fixtureSourceCA   string
	agentCLIs         string
	hidden            []string
	runUIDs           string
	bwrap             string
	cgroupParent      string
	cgroupMount       string
	leafCgroup        bool
	memoryLimit       string
	requireSandbox    bool
	clusterCIDRs      []string
	nodeIPs           []string
	refuseFallback    bool
	loopbackProviders bool
	providerCA        string
	shutdownGrace     time.Duration
	reapOrphans       bool
	labels            map[string]string
	controller        controllerLink
	metrics           MetricsFlags
	probeAddr         string
	log               LogFlags
	logsAddr          string
	logsHost          string
	evidenceKey       string
	protectKernel     bool
}

// NodeAgentCommand is `node-agent`: the daemon of one node (package
// nodeagent) with its executor, sandbox and servers.
func NodeAgentCommand() *cobra.Command {
	f := nodeAgentFlags{}
	cmd := &cobra.Command{
		Use:   "node-agent",
		Short: "Run the node-agent: register this node and execute the HarnessRuns bound to it",
		Long: `Run the HarnessFacts node-agent, one per node (a DaemonSet). It publishes the
node as a HarnessNode (agent CLIs found, sandbox modes that passed preflight,
slots) and heartbeats a Lease; it watches only the runs bound to this node,
claims each attempt, runs the agent in the sandbox and writes status and an
evidence ConfigMap. At start it removes run dirs an earlier process left
behind and ends the runs that process had claimed (reason NodeAgentRestarted).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.reapOrphans && pid1.IsPID1() {
				return runAsInit()
			}
			return runNodeAgent(signals.SetupSignalHandler(), f)
		},
	}
	fl := cmd.Flags()
	f.kube.Add(fl)
	fl.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fl.StringVar(&f.leaseNamespace, "lease-namespace", envOr("POD_NAMESPACE", "harnessfacts-system"), "namespace of the heartbeat Lease (default $POD_NAMESPACE)")
	fl.DurationVar(&f.leaseDuration, "lease-duration", 40*time.Second, "how long the heartbeat Lease stays fresh; renewed every quarter of it")
	fl.Int32Var(&f.slots, "slots", 2, "runs executed at once")
	fl.StringVar(&f.runRoot, "run-root", "/var/lib/harnessfacts/runs", "folder of the run dirs; never a source checkout")
	fl.StringVar(&f.fixtureCache, "fixture-cache-size", "4Gi", "bound of the node's cache of git and OCI fixtures (below the run root, in .fixtures); the least recently used fixture is evicted first")
	fl.StringVar(&f.fixtureSourceCA, "fixture-source-ca-file", "", "PEM bundle of the CAs that git servers' and registries' certificates must chain to when fetching git and OCI fixtures, instead of the system's (a private git server, a test CA)")
	fl.StringVar(&f.imageCache, "image-cache-size", "20Gi", "bound of the node's cache of unpacked environment images (below the run root, in .images); the least recently used image no run uses is evicted first")
	fl.StringVar(&f.agentCLIs, "agent-clis", "", "folder of the agent CLIs' commands (hack/install-agent-clis.sh PREFIX/bin; /opt/harnessfacts/agents/bin in the image); empty: PATH")
	fl.StringSliceVar(&f.hidden, "hide", nil, runflags.HideUsage)
	fl.StringVar(&f.runUIDs, "run-uids", sandbox.DefaultIDRange, "host ids FIRST-LAST the agents run as, one per run at a time as uid and gid (at least --slots of them; in a user-namespaced pod inside its mapped 0-65535)")
	fl.StringVar(&f.bwrap, "bwrap", "", "bubblewrap binary (default: bwrap on PATH)")
	fl.StringVar(&f.cgroupMount, "cgroup-mount", "/run/harnessfacts/cgroup", "on cgroup v2, where to mount a writable cgroup2 when /sys/fs/cgroup is read-only (in a pod); needs CAP_SYS_ADMIN")
	fl.StringVar(&f.cgroupParent, "cgroup-parent", "", "cgroup under which per-run cgroups are made (default: the node-agent's own)")
	fl.DurationVar(&f.shutdownGrace, "shutdown-grace", 50*time.Second, "on SIGTERM (a pod replaced or deleted), how long the node-agent takes to stop: it claims no new run, lets running attempts finish until a reserve of a third of this (at most 15s) is left, then stops those left and hands them back to be scheduled again without using a retry; keep it below the pod's terminationGracePeriodSeconds (the chart's is 60)")
	fl.BoolVar(&f.reapOrphans, "reap-orphans", true, "when the node-agent is PID 1 of its container, run it as the child of a minimal init in this same binary that forwards signals to it and reaps the orphaned processes the kernel hands to PID 1 (a killed sandbox's inner bwrap, what a kubectl exec left behind), so that none stays a zombie")
	fl.BoolVar(&f.requireSandbox, "require-sandbox", true, "refuse to start when no sandbox mode passes preflight, saying why in the HarnessNode's Ready condition (reason SandboxUnavailable); false registers a node that can run agents only unsandboxed")
	fl.StringSliceVar(&f.clusterCIDRs, "cluster-cidrs", nil, "the cluster's Pod and Service ranges (CIDR,...): egress ProviderOnly refuses them, as it refuses loopback, private, link-local, CGNAT and metadata addresses, unless a HarnessPolicy allows the name (network.insideHosts)")
	fl.StringSliceVar(&f.nodeIPs, "node-ips", splitList(os.Getenv("HOST_IPS")), "the node's own addresses (IP,...; default $HOST_IPS, the downward API's status.hostIPs): egress ProviderOnly refuses them, public or not, as it refuses the cluster's ranges, unless a HarnessPolicy allows the name (network.insideHosts); the addresses of the node-agent's own network namespace are refused too")
	fl.BoolVar(&f.loopbackProviders, "loopback-providers", true, "reach a spec.agent.providerURL on this node-agent's own loopback (a model server beside it on a machine of one's own); the chart turns it off: in a pod that loopback is the node-agent's, where its own servers and any sidecar listen")
	fl.BoolVar(&f.refuseFallback, "refuse-fallback", false, "never run an agent in the plain fallback on this node, whatever a run's isolation.policy asks: an AllowFallback run runs sandboxed, or fails with SandboxUnavailable where no sandbox works")
	fl.StringVar(&f.providerCA, "provider-ca-file", "", "PEM bundle of the CAs that model providers' certificates must chain to in the runs' model gateway, instead of the system's (a private provider, a test CA)")
	fl.StringToStringVar(&f.labels, "node-labels", nil, "labels added to those mirrored from the Node (key=value,...), for spec.nodeSelector where no Node of this name exists (the controller matches a Node's own labels)")
	fl.StringVar(&f.controller.url, "controller-url", "", "https URL of the controller's run source, where the node-agent reads the Secret keys and fixture ConfigMaps of the runs it claimed (it has no right to read them itself)")
	fl.StringVar(&f.controller.serverName, "controller-server-name", "", "the name the run source's certificate must carry when --controller-url is an address it does not name (a pod IP where Services do not route); default: --controller-url's host")
	fl.StringVar(&f.controller.ca, "controller-ca", "/var/run/secrets/harnessfacts.io/controller/ca.crt", "PEM CA bundle the run source's certificate must chain to ($VARS are expanded)")
	fl.StringVar(&f.controller.token, "controller-token", "/var/run/secrets/harnessfacts.io/controller/token", "file holding the token the node-agent presents to the run source: a service account token bound to this pod with audience "+runsource.Audience+", re-read at every use ($VARS are expanded)")
	fl.BoolVar(&f.leafCgroup, "move-to-leaf-cgroup", true, "on cgroup v2 without --cgroup-parent, move the node-agent into <own cgroup>/agent so per-run cgroups can have limits")
	fl.StringVar(&f.memoryLimit, "memory-limit", "", "hard memory limit of the node-agent itself (a quantity such as 512Mi): it moves into the leaf cgroup <own cgroup>/agent with this limit, and the per-run cgroups are made beside that leaf, never inside it; empty or 0: no limit")
	fl.BoolVar(&f.protectKernel, "protect-kernel-defaults", false, "leave the kernel's tunables as they are (as the kubelet's flag of that name): the node-agent then does not raise fs.file-max, which on a node without systemd lets one run's memory hold more open files than the node's table allows (the HarnessNode's sandbox verdict says so)")
	f.metrics.Add(fl, ":8082")
	fl.StringVar(&f.probeAddr, "health-probe-bind-address", ":8083", "address of the /healthz and /readyz endpoints")
	f.log.Add(fl)
	fl.StringVar(&f.logsAddr, "logs-bind-address", ":8084", "address of the HTTPS live-output server (harnessfacts logs -f), which authenticates callers with TokenReview or the cluster's client CA and authorizes get on harnessruns/log; \"0\" turns it off")
	fl.StringVar(&f.logsHost, "logs-advertise-host", os.Getenv("POD_IP"), "the IP or DNS name by which followers reach the live-output server (default $POD_IP); it goes into its certificate and each run's status.liveOutput")
	fl.StringVar(&f.evidenceKey, "evidence-key", "/var/lib/harnessfacts/keys/evidence-key.pem", "PEM ECDSA P-256 private key that signs every receipt (made, mode 0600, when absent; a host path, so a restarted node-agent keeps it; its folder is masked in every sandbox); its public part is published in the HarnessNode's status.evidenceKey; \"\" leaves receipts unsigned")
	return cmd
}

// splitList is a comma-separated list's items, none for "".
func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// parseAddrs reads --node-ips.
func parseAddrs(list []string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range list {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return nil, fmt.Errorf("%q is not an IP address", a)
		}
		out = append(out, ip.Unmap())
	}
	return out, nil
}

// runSourceAddrs are the addresses of the controller's run source, which
// an Unrestricted run's sandbox never reaches: its connections leave from
// this node-agent's address, and the run source bounds connections and
// reviews by address, so an agent that held them shut its own node-agent
// out of every other run's Secrets and fixtures. A name that does not
// resolve now leaves the sandboxes able to reach it, which the log says.
func runSourceAddrs(ctx context.Context, rawURL string, logger logr.Logger) []netip.Prefix {
	u, err := url.Parse(rawURL)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if addrs, err = net.DefaultResolver.LookupNetIP(rctx, "ip", host); err != nil {
			logger.Error(err, "WARNING the run source's address could not be resolved: Unrestricted runs' sandboxes are not kept from it", "host", host)
			return nil
		}
	}
	var out []netip.Prefix
	for _, a := range addrs {
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}

// coverClusterAddrs adds to the cluster's ranges the two addresses of it a
// pod always knows, the API server's Service ($KUBERNETES_SERVICE_HOST) and
// its own ($POD_IP), where neither they nor --cluster-cidrs make them
// inside: on a cluster whose ranges are public (GKE's Service range
// 34.118.224.0/20) and an install that did not name them, egress
// ProviderOnly took kubernetes.default for the outside. The rest of such a
// range stays unknown, which the log says loudly.
func coverClusterAddrs(cidrs []netip.Prefix, logger logr.Logger) []netip.Prefix {
	for _, env := range []string{"KUBERNETES_SERVICE_HOST", "POD_IP"} {
		a, err := netip.ParseAddr(os.Getenv(env))
		if err != nil {
			continue
		}
		if a = a.Unmap(); egress.Classify(a, cidrs) != "" {
			continue
		}
		cidrs = append(cidrs, netip.PrefixFrom(a, a.BitLen()))
		logger.Error(nil, "WARNING the cluster's addresses are public and --cluster-cidrs does not name them: egress ProviderOnly refuses this one address, but the rest of its range is reachable from runs that allow it; set --cluster-cidrs (the chart's nodeAgent.clusterCIDRs) to the cluster's Pod and Service ranges",
			"env", env, "address", a.String())
	}
	return cidrs
}

// parseCIDRs reads --cluster-cidrs; an address without a prefix length is
// that one address.
func parseCIDRs(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, c := range list {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		if !strings.Contains(c, "/") {
			a, err := netip.ParseAddr(c)
			if err != nil {
				return nil, fmt.Errorf("%q is neither a CIDR nor an address", c)
			}
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR: %w", c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// parseMemoryLimit reads --memory-limit: a Kubernetes quantity, as the
// chart's nodeAgent.memoryLimit is written; "" and 0 mean no limit.
func parseMemoryLimit(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return 0, fmt.Errorf("--memory-limit %q: %w", s, err)
	}
	v, ok := q.AsInt64()
	if !ok || v < 0 {
		return 0, fmt.Errorf("--memory-limit %q: not a whole, non-negative number of bytes", s)
	}
	if v > 0 && v < 64<<20 {
		return 0, fmt.Errorf("--memory-limit %q: below 64Mi, too small for the node-agent (it asks every agent CLI its version at start)", s)
	}
	return v, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// client makes the node-agent's client of the run source.
func (l controllerLink) client() (*runsource.Client, error) {
	if l.url == "" {
		return nil, errors.New("--controller-url is needed: the node-agent reads runs' Secret keys and fixture ConfigMaps from the controller's run source")
	}
	ca, err := os.ReadFile(os.ExpandEnv(l.ca))
	if err != nil {
		return nil, fmt.Errorf("--controller-ca: %w", err)
	}
	return runsource.NewClientWithServerName(l.url, l.serverName, ca, runsource.TokenFile(os.ExpandEnv(l.token)))
}

func runNodeAgent(ctx context.Context, f nodeAgentFlags) error {
	f.log.SetLogger()
	logger := log.Log.WithName("node-agent")
	if err := checkNodeAgentUser(); err != nil {
		return err
	}
	memoryLimit, err := parseMemoryLimit(f.memoryLimit)
	if err != nil {
		return err
	}
	ranges, err := sandbox.ParseIDRange(f.runUIDs)
	if err != nil {
		return fmt.Errorf("--run-uids: %w", err)
	}
	ids, err := sandbox.NodeIDs(ranges)
	if err != nil {
		return fmt.Errorf("--run-uids: %w", err)
	}
	if f.nodeName == "" {
		return errors.New("the node name is not known: set --node-name or $NODE_NAME (the downward API's spec.nodeName)")
	}
	// (nodeagent.Setup adds the evidence key's folder.)
	hidden, err := runflags.HiddenPaths(f.hidden)
	if err != nil {
		return err
	}
	clusterCIDRs, err := parseCIDRs(f.clusterCIDRs)
	if err != nil {
		return fmt.Errorf("--cluster-cidrs: %w", err)
	}
	nodeIPs, err := parseAddrs(f.nodeIPs)
	if err != nil {
		return fmt.Errorf("--node-ips: %w", err)
	}
	clusterCIDRs = coverClusterAddrs(clusterCIDRs, logger)
	unreachable := runSourceAddrs(ctx, f.controller.url, logger)
	egress.SetPullInside(clusterCIDRs, nodeIPs)
	controller, err := f.controller.client()
	if err != nil {
		return err
	}
	cfg, err := f.kube.RestConfig()
	if err != nil {
		return err
	}
	api, err := nodeagent.NewAPI(cfg, f.nodeName)
	if err != nil {
		return err
	}
	// The node-agent's own metrics, and the Go runtime's and the process's.
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := nodemetrics.Setup(api.Cache.Informer(&harnessv1.HarnessRun{}), reg)
	if err != nil {
		return err
	}
	servers := []func(context.Context) error{}
	metricsServer, err := f.metrics.Listen(api.Client, reg, logger.WithName("metrics"))
	if err != nil {
		return err
	}
	probes, err := metricsserver.ListenProbes(f.probeAddr, logger.WithName("probes"))
	if err != nil {
		return err
	}
	live, endpoint, serveLive, err := ServeLiveOutput(ctx, api.Client, f.logsAddr, f.logsHost)
	if err != nil {
		return err
	}
	servers = append(servers, metricsServer.Serve, probes.Serve, serveLive)
	// In a pod the runtime mounts /sys/fs/cgroup read-only: per-run cgroups
	// then go into a cgroup2 mounted in the pod's own mount namespace.
	cgroupMount, mounted, err := sandbox.WritableCgroup2(f.cgroupMount)
	if err != nil {
		return err
	}
	if mounted {
		logger.Info("/sys/fs/cgroup is read-only (a pod): mounted a writable cgroup2 in this pod's mount namespace for the per-run cgroups", "mount", cgroupMount)
	}
	sandboxOpts := sandbox.Options{Bwrap: f.bwrap, CgroupParent: f.cgroupParent, MoveToLeafCgroup: f.leafCgroup, CgroupMount: cgroupMount}
	// Before anything else runs: the node-agent's own leaf cgroup and its
	// hard memory limit, and the runs' cgroups beside it, fixed once.
	sandboxOpts, placement, placeErr := sandbox.PlaceNodeAgent(sandboxOpts, memoryLimit)
	if placeErr == nil {
		logger.Info("cgroups placed", "placement", placement.String())
		defer func() {
			if err := placement.Release(); err != nil {
				logger.Error(err, "leaving the node-agent's leaf cgroup")
			}
		}()
	}
	// Before the preflight, whose verdict says whether one run could fill
	// the node's open-file table.
	raiseFileTable(logger, f.protectKernel)
	if f.requireSandbox {
		c := api.Client
		if placeErr != nil {
			err = refuse(ctx, c, f.nodeName, f.slots, nil, fmt.Sprintf("the node-agent refuses to run agents on node %s: it cannot place itself and its runs' cgroups (%v)%s", f.nodeName, placeErr, modeHint()))
		} else {
			err = refuseWithoutSandbox(ctx, c, f.nodeName, f.slots, sandboxOpts)
		}
		if err != nil {
			logger.Error(nil, err.Error())
			return err
		}
	} else if placeErr != nil {
		logger.Error(placeErr, "the node-agent could not place itself and its runs' cgroups; without --require-sandbox it goes on, with no bound of its own")
	}
	providerCAs, err := runflags.LoadCAs(f.providerCA)
	if err != nil {
		return fmt.Errorf("--provider-ca-file: %w", err)
	}
	cacheQty, err := resource.ParseQuantity(f.imageCache)
	if err != nil || cacheQty.Value() <= 0 {
		return fmt.Errorf("--image-cache-size %q: want a positive size such as 20Gi", f.imageCache)
	}
	imageCacheBytes := cacheQty.Value()
	fixtureQty, err := resource.ParseQuantity(f.fixtureCache)
	if err != nil || fixtureQty.Value() <= 0 {
		return fmt.Errorf("--fixture-cache-size %q: want a positive size such as 4Gi", f.fixtureCache)
	}
	// Git and OCI fixtures are held in the node-agent's memory while their
	// runs last: under a memory bound, each is bounded so that a full set
	// of slots cannot take the node-agent past it (a run author could
	// otherwise have it killed, and every run of the node with it).
	fixtureLimits := fixturesource.LimitsFor(memoryLimit, int(f.slots))
	if memoryLimit > 0 && fixtureLimits.MaxTotalBytes < fixturesource.DefaultLimits.MaxTotalBytes {
		logger.Info("git and OCI fixtures are bounded by the node-agent's memory: raise --memory-limit for larger ones",
			"maxFixtureBytes", fixtureLimits.MaxTotalBytes, "memoryLimit", memoryLimit, "slots", f.slots)
	}
	fixtureCAs, err := runflags.LoadCAs(f.fixtureSourceCA)
	if err != nil {
		return fmt.Errorf("--fixture-source-ca-file: %w", err)
	}
	agent, err := nodeagent.Setup(ctx, api, nodeagent.SetupOptions{
		NodeName: f.nodeName, LeaseNamespace: f.leaseNamespace, LeaseDuration: f.leaseDuration, Slots: f.slots,
		RunRoot: f.runRoot, Hidden: hidden, IDs: ids, ImageCacheBytes: imageCacheBytes,
		FixtureCacheBytes: fixtureQty.Value(), FixtureSourceCAs: fixtureCAs, FixtureLimits: fixtureLimits,
		Sandbox:  sandboxOpts,
		Adapters: adapters.New(adapters.Config{CLIDir: f.agentCLIs}), ExtraLabels: f.labels,
		Controller: controller, RefuseFallback: f.refuseFallback, NoLoopbackProviders: !f.loopbackProviders, Unreachable: unreachable, ProviderCAs: providerCAs, ClusterCIDRs: clusterCIDRs, NodeIPs: nodeIPs,
		Observer: metrics, Live: live, LiveEndpoint: endpoint,
		HandBackAfter: handBackAfter(f.shutdownGrace),
		EvidenceKey:   f.evidenceKey,
	})
	if err != nil {
		return err
	}
	logger.Info("starting the node-agent", "node", f.nodeName, "slots", f.slots, "runRoot", f.runRoot)
	return run(ctx, agent, servers, f.shutdownGrace)
}

// run runs agent and the servers until ctx ends, or until one of them
// fails (the others then stop too). A stopping agent drains (its attempts
// finish or are handed back); it gets grace to do so, as a
// controller-runtime manager's graceful shutdown timeout bounds its
// runnables, after which the process exits (and with it every agent, bwrap
// --die-with-parent).
func run(ctx context.Context, agent *nodeagent.Agent, servers []func(context.Context) error, grace time.Duration) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stopped := make(chan error, 1)
	go func() { stopped <- agent.Start(ctx) }()
	var wg sync.WaitGroup
	for _, serve := range servers {
		if serve == nil {
			continue
		}
		wg.Go(func() {
			if err := serve(ctx); err != nil {
				cancel(err)
			}
		})
	}
	var err error
	select {
	case err = <-stopped:
		cancel(err)
	case <-ctx.Done():
		select {
		case err = <-stopped:
		case <-time.After(grace):
			err = fmt.Errorf("the node-agent did not stop within --shutdown-grace %s", grace)
		}
	}
	wg.Wait()
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	return err
}

// ServeLiveOutput binds the live-output server (package livelog) to addr,
// reached at host, asking c about its callers; the caller runs serve, which
// serves until its context ends. addr "0" (or an unknown host) turns it
// off: no hub, no endpoint, and a serve that only waits for its context.
func ServeLiveOutput(ctx context.Context, c *kube.Client, addr, host string) (live executor.LiveOutput, endpoint *nodeagent.LiveEndpoint, serve func(context.Context) error, err error) {
	off := func(ctx context.Context) error { <-ctx.Done(); return nil }
	if addr == "0" {
		return nil, nil, off, nil
	}
	logger := log.Log.WithName("live-output")
	if host == "" {
		// Outside a pod (no $POD_IP) nobody can be told where to connect.
		logger.Info("WARNING not serving the runs' live output: --logs-advertise-host is empty (the chart sets $POD_IP); `harnessfacts logs -f` on this node's runs waits for their end instead. Give the address by which users reach this node-agent, or --logs-bind-address=0 to silence this")
		return nil, nil, off, nil
	}
	hub := livelog.NewHub()
	l, err := livelog.Listen(ctx, hub, livelog.Config{BindAddress: addr, AdvertiseHost: host, Reviews: c, CAReader: c, Log: logger})
	if err != nil {
		return nil, nil, nil, err
	}
	logger.Info("serving the runs' live output", "url", l.BaseURL, "certificateSHA256", l.CertificateSHA256)
	return hub, &nodeagent.LiveEndpoint{BaseURL: l.BaseURL, CertificateSHA256: l.CertificateSHA256},
		func(ctx context.Context) error { return l.Server.Serve(ctx, l.Listener) }, nil
}

// handBackAfter is how long a stopping node-agent lets its attempts finish
// before it hands back those left: the shutdown grace less a reserve for
// stopping their agents, removing their run dirs and writing the
// hand-backs (a third of the grace, at most 15s).
func handBackAfter(grace time.Duration) time.Duration {
	return grace - min(grace/3, 15*time.Second)
}

// runAsInit makes this process, PID 1 of its container, a minimal init: it
// runs the same command again as its child (which, not being PID 1, is the
// node-agent), forwards signals to it, reaps every orphan, and exits with
// the child's status (package pid1).
func runAsInit() error {
	line, _ := json.Marshal(map[string]string{"level": "info", "ts": time.Now().UTC().Format(time.RFC3339), "logger": "pid1",
		"msg": "the node-agent is PID 1 of its container: it runs as the child of a minimal init that reaps orphaned processes (--reap-orphans)"})
	fmt.Fprintln(os.Stderr, string(line))
	code, err := pid1.Run("/proc/self/exe", os.Args, os.Environ())
	if err != nil {
		return err
	}
	os.Exit(code)
	return nil
}

// raiseFileTable raises the node's open-file table where one run could
// fill it (sandbox.RaiseFileTable), and says what it did: a run that fills
// it refuses every unprivileged process of the node a file, the other
// runs' agents included.
func raiseFileTable(logger logr.Logger, protect bool) {
	if protect {
		return
	}
	before, after, err := sandbox.RaiseFileTable()
	switch {
	case err != nil:
		logger.Info("WARNING: could not raise the node's open-file table; one run may be able to fill it (the sandbox's preflight verdict says whether)", "error", err.Error())
	case after != before:
		logger.Info("raised the node's open-file table, as systemd does at boot, so that no run can fill it", "fs.file-max before", before, "after", after)
	}
}
