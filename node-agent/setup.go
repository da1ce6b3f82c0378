package nodeagent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/runsource"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// SetupOptions configure a node-agent as the command line does.
type SetupOptions struct {
	NodeName       string
	LeaseNamespace string
	LeaseDuration  time.Duration
	Slots          int32
	RunRoot        string
	Hidden         []string
	// ImageCacheBytes bounds the cache of environment images (RunRoot's
	// .images); 0 means envimage.DefaultMaxBytes.
	ImageCacheBytes int64
	// FixtureCacheBytes bounds the cache of git and OCI fixtures
	// (RunRoot's .fixtures); 0 means fixturesource.DefaultCacheBytes.
	FixtureCacheBytes int64
	// FixtureSourceCAs verify git servers' and registries' certificates
	// when fetching fixtures (--fixture-source-ca-file; nil: the system's).
	FixtureSourceCAs *x509.CertPool
	// FixtureLimits bound each git or OCI fixture (executor.Options).
	FixtureLimits fixture.Limits
	// IDs gives each run its own uid and gid (the --run-uids range;
	// sandbox.DefaultIDRange when nil).
	IDs      sandbox.IDs
	Sandbox  sandbox.Options
	Adapters adapters.Registry
	// ExtraLabels are added to the labels mirrored from the Node.
	ExtraLabels map[string]string
	// InitBinary is the harnessfacts binary (os.Executable() when empty).
	InitBinary string
	// Controller is where the node-agent reads the Secret keys and fixture
	// ConfigMaps of the runs it claimed: it may not read them itself.
	Controller *runsource.Client
	// RefuseFallback refuses the plain fallback on this node, whatever a
	// run's isolation policy asks (--refuse-fallback).
	RefuseFallback bool
	// NoLoopbackProviders refuses runs whose providerURL is on the
	// node-agent's own loopback (executor.Options.NoLoopbackProviders).
	NoLoopbackProviders bool
	// Unreachable: executor.Options.Unreachable.
	Unreachable []netip.Prefix
	// ProviderCAs verify model providers' certificates in the model
	// gateway (--provider-ca-file; nil: the system's roots).
	ProviderCAs *x509.CertPool
	// ClusterCIDRs are the cluster's Pod and Service ranges, which egress
	// ProviderOnly refuses (--cluster-cidrs).
	ClusterCIDRs []netip.Prefix
	// NodeIPs are the node's own addresses, which egress ProviderOnly
	// refuses too (--node-ips).
	NodeIPs []netip.Addr
	// Observer hears of each attempt's steps and agent start (the
	// node-agent's metrics).
	Observer executor.Observer
	// Live receives each attempt's redacted output as it is produced (the
	// log server's livelog.Hub); LiveEndpoint says where it is served.
	Live         executor.LiveOutput
	LiveEndpoint *LiveEndpoint
	// HandBackAfter is how long, once the node-agent is stopping, its
	// running attempts may still finish; those left are then handed back
	// (Options.HandBackAfter).
	HandBackAfter time.Duration
	// EvidenceKey is the file of the node's receipt signing key (made on
	// first start, kept across restarts); empty: receipts are not signed.
	EvidenceKey string
	// Image is the node-agent's container image, recorded in receipts.
	Image string
}

// Setup prepares the node-agent of api's node: it makes the executor,
// removes what an earlier process's runs left behind, finds what the node
// offers (sandbox modes, the adapters' CLI versions), and makes the Agent;
// its Start runs it.
func Setup(ctx context.Context, api *API, opts SetupOptions) (*Agent, error) {
	if opts.Controller == nil {
		return nil, errors.New("node-agent: no controller to read runs' Secret keys and fixtures from (--controller-url)")
	}
	if opts.IDs == nil {
		r, err := sandbox.ParseIDRange(sandbox.DefaultIDRange)
		if err != nil {
			return nil, err
		}
		if opts.IDs, err = sandbox.NodeIDs(r); err != nil {
			return nil, err
		}
	}
	if opts.IDs.Range().Count < int(opts.Slots) {
		return nil, fmt.Errorf("node-agent: the uid range %s has %d ids for %d slots: each running run needs its own", opts.IDs.Range(), opts.IDs.Range().Count, opts.Slots)
	}
	var key *evidence.Key
	if opts.EvidenceKey != "" {
		path, err := filepath.Abs(opts.EvidenceKey)
		if err != nil {
			return nil, fmt.Errorf("node-agent: the evidence key: %w", err)
		}
		if key, err = evidence.LoadOrCreateKey(path); err != nil {
			return nil, fmt.Errorf("node-agent: %w", err)
		}
		// Whatever else is hidden, no agent sees the key's folder.
		opts.Hidden = append(append([]string(nil), opts.Hidden...), filepath.Dir(path))
	}
	// The executor tells the Agent of each attempt's limits; the Agent is
	// made after it, with what the executor found.
	var agent *Agent
	exec, err := executor.New(executor.Options{
		Sources:           ClusterSources{Controller: opts.Controller},
		RunRoot:           opts.RunRoot,
		ImageCacheBytes:   opts.ImageCacheBytes,
		FixtureCacheBytes: opts.FixtureCacheBytes,
		FixtureSourceCAs:  opts.FixtureSourceCAs,
		FixtureLimits:     opts.FixtureLimits,
		Sandbox:           opts.Sandbox,
		Hidden:            opts.Hidden,
		IDs:               opts.IDs,
		InitBinary:        opts.InitBinary,
		Slots:             int(opts.Slots),
		Adapters:          opts.Adapters,
		NodeName:          opts.NodeName,
		SigningKey:        key,
		Image:             opts.Image,
		// The evidence's write and the run's cleanup at once (finish
		// waits for the cleanup before the terminal status).
		CleanBehind: true,

		RefuseFallback:      opts.RefuseFallback,
		NoLoopbackProviders: opts.NoLoopbackProviders,
		Unreachable:         opts.Unreachable,
		ProviderCAs:         opts.ProviderCAs,
		// HarnessPolicies and Namespaces' labels from the cache (see
		// policyViolations for how fresh).
		GatewayLimits: gatewayLimits(api.Cache),
		Pricing:       pricing(api.Cache),
		PolicyViolations: func(ctx context.Context, run *harnessv1.HarnessRun) ([]string, error) {
			return policyViolations(ctx, api.Cache, run)
		},
		ClusterCIDRs: opts.ClusterCIDRs,
		NodeAddrs:    opts.NodeIPs,
		// status.limits once the fixture is read and the attempt has
		// lasted: the controller's deadline follows the episode it
		// resolved (limits.go).
		LimitsSettled: func(ctx context.Context, run *harnessv1.HarnessRun, lim harnessv1.ResolvedLimits, checks int32) {
			agent.limitsSettled(ctx, run, lim, checks)
		},
		Observer: opts.Observer,
		Live:     opts.Live,
	})
	if err != nil {
		return nil, err
	}
	if err := exec.Ready(); err != nil {
		_ = exec.Close()
		return nil, err
	}
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithName("node-agent"))
	if err := exec.RemoveLeftovers(ctx); err != nil {
		_ = exec.Close()
		return nil, err
	}
	agent, err = New(api, Options{
		NodeName:       opts.NodeName,
		LeaseNamespace: opts.LeaseNamespace,
		LeaseDuration:  opts.LeaseDuration,
		Slots:          opts.Slots,
		SandboxModes:   exec.SandboxModes(ctx),
		Adapters:       exec.Adapters(ctx),
		Executor:       exec,
		ExtraLabels:    opts.ExtraLabels,
		LiveEndpoint:   opts.LiveEndpoint,
		HandBackAfter:  opts.HandBackAfter,
		EvidenceKey:    evidenceKeyInfo(key),
	})
	if err != nil {
		_ = exec.Close()
		return nil, err
	}
	// The run dirs waiting for removal go once the attempts are done.
	agent.closers = append(agent.closers, exec.Close)
	return agent, nil
}

// API is a node-agent's view of the API server: a client, and a cache of
// the runs bound to its node (a field selector on status.nodeName, so a
// node never sees, or needs RBAC for, the cluster's other runs), of the
// HarnessPolicies, and of the Namespaces' labels (what policies select
// by). Everything else it touches (its own HarnessNode and Lease, its
// Node, evidence ConfigMaps) is read and written directly, never cached
// cluster-wide. It reads no Secret or ConfigMap at all (ClusterSources).
type API struct {
	Client *kube.Client
	Cache  *kube.Cache
	node   string
}

// NewAPI makes the API of node nodeName from cfg.
func NewAPI(cfg *rest.Config, nodeName string) (*API, error) {
	c, err := kube.New(cfg)
	if err != nil {
		return nil, err
	}
	k, err := kube.NewCache(c,
		kube.Watched{Object: &harnessv1.HarnessRun{}, List: &harnessv1.HarnessRunList{},
			Field: fields.OneTermEqualSelector("status.nodeName", nodeName), Transform: cachedRun},
		kube.Watched{Object: &harnessv1.HarnessPolicy{}, List: &harnessv1.HarnessPolicyList{}},
		kube.Watched{Object: &corev1.Namespace{}, List: &corev1.NamespaceList{}, Transform: namespaceLabels},
	)
	if err != nil {
		return nil, err
	}
	return &API{Client: c, Cache: k, node: nodeName}, nil
}

// syncCache waits for the cache's first lists, and says clearly which one
// the node-agent may not make (its ClusterRole lacks list and watch).
func (a *Agent) syncCache(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.opts.CacheSyncTimeout)
	defer cancel()
	for _, w := range []struct {
		obj  kube.Object
		what string
	}{
		{&harnessv1.HarnessRun{}, "the HarnessRuns bound to this node (the node-agent needs list and watch on them)"},
		{&harnessv1.HarnessPolicy{}, "HarnessPolicies (the node-agent needs list and watch on them)"},
		{&corev1.Namespace{}, "Namespaces for the labels HarnessPolicies select by (the node-agent needs list and watch on namespaces)"},
	} {
		if !cache.WaitForCacheSync(ctx.Done(), a.cache.Informer(w.obj).HasSynced) {
			return fmt.Errorf("watching %s: not listed within %s", w.what, a.opts.CacheSyncTimeout)
		}
	}
	return nil
}

// namespaceLabels is what the cache keeps of a Namespace: its name and
// labels, what HarnessPolicies select by.
func namespaceLabels(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{TypeMeta: ns.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: ns.Name, UID: ns.UID,
		ResourceVersion: ns.ResourceVersion, Labels: ns.Labels}}, nil
}

// cachedRun is the cache's transform of a run bound to this node. A run
// stays bound to the node it ended on until it is deleted (a run without
// ttlSecondsAfterFinished, never), so the cache would hold every run the
// node ever ran, whole: its spec (inline files, prompt), its status
// (checks, artifacts, usage) and the metadata its author gave it, up to
// the API server's object size each; a node-agent's memory (512Mi in the
// chart) would grow with its history until it was OOM-killed with every
// run it held. Of an ended run only what reconcile, sweep and the node's
// metrics (nodemetrics, from the update that ends it) read is kept: its
// name, UID, phase, node and attempt, its verdict and reason, and the few
// figures the metrics count. A run sent back from an end (a
// retry) comes whole with its next version; running again the transform
// on what it made changes nothing (client-go's informer transforms the
// objects of its first list twice).
func cachedRun(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	run, ok := obj.(*harnessv1.HarnessRun)
	if !ok || !run.Status.Phase.Terminal() {
		return obj, nil
	}
	st := &run.Status
	kept := harnessv1.HarnessRunStatus{Phase: st.Phase, NodeName: st.NodeName, Attempt: st.Attempt,
		Verdict: st.Verdict, FailureClass: st.FailureClass, Reason: st.Reason}
	if st.Agent != nil {
		kept.Agent = &harnessv1.AgentStatus{OOMKilled: st.Agent.OOMKilled}
	}
	if st.Network != nil {
		kept.Network = &harnessv1.NetworkStatus{Egress: st.Network.Egress, Denied: st.Network.Denied}
	}
	if st.MCP != nil {
		kept.MCP = &harnessv1.MCPStatus{Transport: st.MCP.Transport, Calls: st.MCP.Calls}
	}
	if st.Sandbox != nil {
		kept.Sandbox = &harnessv1.SandboxStatus{Mode: st.Sandbox.Mode}
	}
	return &harnessv1.HarnessRun{
		TypeMeta: run.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: run.Name, Namespace: run.Namespace, UID: run.UID,
			ResourceVersion: run.ResourceVersion, Generation: run.Generation, DeletionTimestamp: run.DeletionTimestamp},
		Status: kept,
	}, nil
}

// evidenceKeyInfo is what HarnessNode status publishes of the key.
func evidenceKeyInfo(k *evidence.Key) *harnessv1.EvidenceKey {
	if k == nil {
		return nil
	}
	return &harnessv1.EvidenceKey{KeyID: k.Public().ID, Algorithm: evidence.Algorithm, PublicKey: k.Public().PEM}
}
