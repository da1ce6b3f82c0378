package nodeagent

import (
	"context"
	"fmt"
	"runtime"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
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
		// Copies: the API server's answer is decoded into node, into the
		// slices, map and pointer it holds, and a.opts is read by every
		// goroutine.
		mine := (&harnessv1.HarnessNodeStatus{Adapters: a.opts.Adapters, SandboxModes: a.opts.SandboxModes,
			Labels: labels, EvidenceKey: a.opts.EvidenceKey}).DeepCopy()
		st.Adapters, st.SandboxModes, st.Labels, st.EvidenceKey = mine.Adapters, mine.SandboxModes, mine.Labels, mine.EvidenceKey
		st.LeaseNamespace = a.opts.LeaseNamespace
		st.SlotsInUse = int32(a.runningCount())
		st.ObservedGeneration = node.Generation
		ready := metav1.Condition{Type: harnessv1.ConditionNodeReady, Status: metav1.ConditionTrue,
			Reason: harnessv1.ReasonHeartbeat, Message: "the node-agent heartbeats its Lease and a sandbox passed preflight",
			LastTransitionTime: now, ObservedGeneration: node.Generation}
		if !a.anySandbox() {
			ready.Status, ready.Reason = metav1.ConditionFalse, harnessv1.ReasonSandboxUnavailable
			ready.Message = "no sandbox mode passed preflight; see status.sandboxModes"
		}
		meta.SetStatusCondition(&st.Conditions, ready)
		// A preflight's message or a CLI's version line is the node's to
		// print: cut to the schema so the write cannot fail on it.
		st.Fit()
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
	if err := a.client.Get(ctx, types.NamespacedName{Name: a.opts.NodeName}, node); err != nil {
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
