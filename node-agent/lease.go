package nodeagent

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/kube"
)

// renewLease creates the node's Lease or renews it. The controller judges
// the node lost when the Lease expires.
func (a *Agent) renewLease(ctx context.Context) error {
	secs := int32(a.opts.LeaseDuration / time.Second)
	key := types.NamespacedName{Namespace: a.opts.LeaseNamespace, Name: a.opts.NodeName}
	now := metav1.NewMicroTime(a.opts.Clock.Now())
	// A copy: the API server's answer is decoded into the Lease, through
	// its pointers, and a.opts is read by every goroutine.
	holder := a.opts.NodeName
	lease := &coordinationv1.Lease{}
	err := a.client.Get(ctx, key, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs,
				AcquireTime: &now, RenewTime: &now},
		}
		err = a.client.Create(ctx, lease)
	} else if err == nil {
		lease.Spec.HolderIdentity = &holder
		lease.Spec.LeaseDurationSeconds = &secs
		lease.Spec.RenewTime = &now
		err = a.client.Update(ctx, lease)
	}
	if err != nil {
		return fmt.Errorf("renewing the heartbeat Lease %s: %w", key, err)
	}
	return nil
}

// heartbeat renews the Lease every quarter of its duration until ctx ends.
// start made it before the HarnessNode said Ready.
func (a *Agent) heartbeat(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("heartbeat")
	ticker := a.opts.Clock.NewTicker(a.opts.LeaseDuration / 4)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
		if err := a.renewLease(ctx); err != nil {
			logger.Error(err, "retrying at the next tick")
		}
		err := a.updateSlotsInUse(ctx)
		if apierrors.IsNotFound(err) {
			err = a.registerAgain(ctx)
		}
		if err != nil {
			logger.Error(err, "updating status.slotsInUse failed")
		}
	}
}

// registerAgain makes the HarnessNode again when someone deleted it while
// this node-agent runs (`kubectl delete hfnode`): made only at start, it
// was otherwise gone for good, and the node took no run until the pod was
// restarted. The controller has ended the runs it held (NodeLost); their
// attempts stop through the claim reconciler as usual. A draining
// node-agent leaves it to the next one: it would say Ready and claim
// nothing. No Event: the node-agent may write Events only about runs.
func (a *Agent) registerAgain(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("heartbeat")
	if a.isDraining() {
		logger.Info("the HarnessNode was deleted; the node-agent drains, so the next one registers it")
		return nil
	}
	logger.Info("the HarnessNode was deleted while the node-agent runs; registering it again")
	if err := a.register(ctx); err != nil {
		return fmt.Errorf("registering the deleted HarnessNode again: %w", err)
	}
	return nil
}

// updateSlotsInUse keeps the informational slotsInUse fresh; the controller
// counts slots from the runs themselves.
func (a *Agent) updateSlotsInUse(ctx context.Context) error {
	node := &harnessv1.HarnessNode{}
	if err := a.client.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, node); err != nil {
		return err
	}
	inUse := int32(a.runningCount())
	if node.Status.SlotsInUse == inUse {
		return nil
	}
	base := node.DeepCopy()
	node.Status.SlotsInUse = inUse
	return a.client.Status().Patch(ctx, node, kube.MergeFrom(base))
}
