package executor

import (
	"context"
	"sort"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// SandboxModes reports each sandbox mode as the preflight New ran found it
// (the runners chosen then are the ones runs get), for the node's
// HarnessNode. An executor made without New runs the preflight now.
func (e *Executor) SandboxModes(ctx context.Context) []harnessv1.SandboxModeInfo {
	_ = e.waitChoice(context.WithoutCancel(ctx))
	avail := e.avail
	if avail == nil {
		avail = sandbox.Preflight(ctx, e.opts.Sandbox)
	}
	var modes []harnessv1.SandboxModeInfo
	for _, av := range avail {
		if av.Mode == sandbox.ModePlain && e.opts.RefuseFallback {
			av.Available, av.Reason = false, "this node refuses the plain fallback (--refuse-fallback)"
		}
		modes = append(modes, harnessv1.SandboxModeInfo{Mode: string(av.Mode), Available: av.Available, Message: truncate(av.Reason, 1024)})
		if !av.Available {
			log.FromContext(ctx).Info("sandbox mode unavailable", "mode", av.Mode, "reason", av.Reason)
		} else if sandbox.Degraded(av.Reason) {
			log.FromContext(ctx).Info("WARNING: runs here go without a bound the sandbox gives elsewhere", "mode", av.Mode, "preflight", av.Reason)
		}
	}
	return modes
}

// Adapters reports the adapters whose CLI answers on this node, with its
// version, for the node's HarnessNode. Each CLI is asked at once (a Node.js
// or Python CLI takes seconds to start); the answers are kept for the
// receipts.
func (e *Executor) Adapters(ctx context.Context) []harnessv1.AdapterInfo {
	var (
		found []harnessv1.AdapterInfo
		mu    sync.Mutex
		wg    sync.WaitGroup
	)
	for name, a := range e.opts.Adapters {
		wg.Go(func() {
			v, err := a.Version(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				log.FromContext(ctx).Info("adapter not available on this node", "adapter", name, "reason", err.Error())
				return
			}
			e.versions.Store(name, v)
			found = append(found, harnessv1.AdapterInfo{Name: name, Version: truncate(v, 128)})
		})
	}
	wg.Wait()
	sort.Slice(found, func(i, j int) bool { return found[i].Name < found[j].Name })
	return found
}
