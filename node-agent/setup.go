package nodeagent

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
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
	UID, GID       int
	Sandbox        sandbox.Options
	Adapters       adapters.Registry
	// ExtraLabels are added to the labels mirrored from the Node.
	ExtraLabels map[string]string
	// InitBinary is the harnessfacts binary (os.Executable() when empty).
	InitBinary string
}

// Setup prepares a node-agent on mgr: it runs the sandbox preflight, finds
// the adapters' CLI versions, removes run dirs an earlier process left
// behind, and adds the Agent to mgr. mgr must have been made with
// ManagerOptions(opts.NodeName).
func Setup(ctx context.Context, mgr manager.Manager, opts SetupOptions) (*Agent, error) {
	logger := log.FromContext(ctx).WithName("node-agent")
	exec, err := NewExecutor(ExecutorOptions{
		Sources:    ClusterSources{Reader: mgr.GetAPIReader()},
		RunRoot:    opts.RunRoot,
		Sandbox:    opts.Sandbox,
		Hidden:     opts.Hidden,
		UID:        opts.UID,
		GID:        opts.GID,
		InitBinary: opts.InitBinary,
		Adapters:   opts.Adapters,
		NodeName:   opts.NodeName,
	})
	if err != nil {
		return nil, err
	}
	// What a killed node-agent left: its runs' processes, the sandbox's own
	// leftovers (Windows
	// AppContainer profiles and grants), then the run dirs whose owner lock
	// nobody holds, and nothing else.
	n, err := killLeftovers(exec.opts.RunRoot)
	if err != nil {
		return nil, fmt.Errorf("killing what earlier runs left running: %w", err)
	}
	if n > 0 {
		logger.Info("killed processes an earlier node-agent's runs left running", "count", n)
	}
	recovered, err := sandbox.RecoverAbandoned(exec.opts.RunRoot)
	if err != nil {
		return nil, fmt.Errorf("recovering abandoned sandboxes: %w", err)
	}
	for _, r := range recovered {
		logger.Info("removed what an earlier node-agent's sandbox left behind", "what", r)
	}
	removed, err := exec.RemoveAbandoned()
	if err != nil {
		return nil, fmt.Errorf("removing abandoned run dirs: %w", err)
	}
	for _, d := range removed {
		logger.Info("removed a run dir an earlier node-agent left behind", "dir", d)
	}

	var modes []harnessv1.SandboxModeInfo
	for _, av := range sandbox.Preflight(ctx, opts.Sandbox) {
		modes = append(modes, harnessv1.SandboxModeInfo{Mode: string(av.Mode), Available: av.Available, Message: truncate(av.Reason, 1024)})
		if !av.Available {
			logger.Info("sandbox mode unavailable", "mode", av.Mode, "reason", av.Reason)
		}
	}
	// Each CLI is asked its version at once (a Node.js or Python CLI takes
	// seconds to start); the executor keeps the answers for the receipts.
	var (
		found []harnessv1.AdapterInfo
		mu    sync.Mutex
		wg    sync.WaitGroup
	)
	for name, a := range opts.Adapters {
		wg.Go(func() {
			v, err := a.Version(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				logger.Info("adapter not available on this node", "adapter", name, "reason", err.Error())
				return
			}
			exec.versions.Store(name, v)
			found = append(found, harnessv1.AdapterInfo{Name: name, Version: truncate(v, 128)})
		})
	}
	wg.Wait()
	sort.Slice(found, func(i, j int) bool { return found[i].Name < found[j].Name })

	return New(mgr, Options{
		NodeName:       opts.NodeName,
		LeaseNamespace: opts.LeaseNamespace,
		LeaseDuration:  opts.LeaseDuration,
		Slots:          opts.Slots,
		Adapters:       found,
		SandboxModes:   modes,
		Executor:       exec,
		ExtraLabels:    opts.ExtraLabels,
	})
}
