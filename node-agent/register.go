package nodeagent

import (
	"context"
	"fmt"
	"runtime"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/version"
)

// register creates or updates this node's HarnessNode: what the node offers
// (slots) and what it found (adapters, sandbox modes, OS, the Node's labels).
// Ready is True only when at least one sandbox mode passed preflight, or the
// plain fallback is all this node offers and it says so.
func (a *Agent) register(ctx context.Context) error {
	labels := a.nodeLabels(ctx)
	now := metav1.NewTime(a.opts.Clock.Now())

	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		node := &harnessv1.HarnessNode{}
		err := a.client.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, node)
		switch {
		case apierrors.IsNotFound(err):
			node = &harnessv1.HarnessNode{
				ObjectMeta: metav1.ObjectMeta{Name: a.opts.NodeName},
				Spec:       harnessv1.HarnessNodeSpec{Slots: a.opts.Slots},
			}
			if err := a.client.Create(ctx, node); err != nil {
				return fmt.Errorf("creating HarnessNode %s: %w", a.opts.NodeName, err)
			}
		case err != nil:
			return fmt.Errorf("reading HarnessNode %s: %w", a.opts.NodeName, err)
		case node.Spec.Slots != a.opts.Slots:
			node.Spec.Slots = a.opts.Slots
			if err := a.client.Update(ctx, node); err != nil {
				return err
			}
		}

		st := &node.Status
		st.OS, st.Arch, st.AgentVersion = runtime.GOOS, runtime.GOARCH, version.String()
		st.Adapters = a.opts.Adapters
		st.SandboxModes = a.opts.SandboxModes
		st.Labels = labels
		st.LeaseNamespace = a.opts.LeaseNamespace
		st.SlotsInUse = int32(a.executingCount())
		ready := metav1.Condition{Type: harnessv1.ConditionNodeReady, Status: metav1.ConditionTrue,
			Reason: harnessv1.ReasonHeartbeat, Message: "the node-agent heartbeats its Lease and a sandbox passed preflight",
			LastTransitionTime: now}
		if !a.anySandbox() {
			ready.Status, ready.Reason = metav1.ConditionFalse, harnessv1.ReasonSandboxUnavailable
			ready.Message = "no sandbox mode passed preflight; see status.sandboxModes"
		}
		meta.SetStatusCondition(&st.Conditions, ready)
		return a.client.Status().Update(ctx, node)
	})
}

func (a *Agent) anySandbox() bool {
	for _, m := range a.opts.SandboxModes {
		if m.Available && m.Mode != "plain" {
			return true
		}
	}
	return false
}

// nodeLabels mirrors the labels of the Node this agent runs on, so that
// spec.nodeSelector of runs can use them. Without a Node (a laptop, a test),
// or without permission to read it, the HarnessNode has no labels; that is
// logged, never fatal.
func (a *Agent) nodeLabels(ctx context.Context) map[string]string {
	node := &corev1.Node{}
	if err := a.apiReader.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, node); err != nil {
		log.FromContext(ctx).Info("not mirroring Node labels", "node", a.opts.NodeName, "reason", err.Error())
		return a.opts.ExtraLabels
	}
	labels := map[string]string{}
	for k, v := range node.Labels {
		labels[k] = v
	}
	for k, v := range a.opts.ExtraLabels {
		labels[k] = v
	}
	return labels
}

// renewLease creates the node's Lease or renews it. The controller judges
// the node lost when the Lease expires.
func (a *Agent) renewLease(ctx context.Context) error {
	secs := int32(a.opts.LeaseDuration / time.Second)
	key := types.NamespacedName{Namespace: a.opts.LeaseNamespace, Name: a.opts.NodeName}
	now := metav1.NewMicroTime(a.opts.Clock.Now())
	lease := &coordinationv1.Lease{}
	err := a.client.Get(ctx, key, lease)
	if apierrors.IsNotFound(err) {
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &a.opts.NodeName, LeaseDurationSeconds: &secs,
				AcquireTime: &now, RenewTime: &now},
		}
		err = a.client.Create(ctx, lease)
	} else if err == nil {
		lease.Spec.HolderIdentity = &a.opts.NodeName
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
		if err := a.updateSlotsInUse(ctx); err != nil {
			logger.Error(err, "updating status.slotsInUse failed")
		}
	}
}

// updateSlotsInUse keeps the informational slotsInUse fresh; the controller
// counts slots from the runs themselves.
func (a *Agent) updateSlotsInUse(ctx context.Context) error {
	node := &harnessv1.HarnessNode{}
	if err := a.client.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, node); err != nil {
		return err
	}
	inUse := int32(a.executingCount())
	if node.Status.SlotsInUse == inUse {
		return nil
	}
	base := node.DeepCopy()
	node.Status.SlotsInUse = inUse
	return a.client.Status().Patch(ctx, node, client.MergeFrom(base))
}
