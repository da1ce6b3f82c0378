package controllers

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Pending reasons, the label of the pending-runs metric: why a run fits no
// node.
const (
	PendingNoNodes      = "NoNodes"
	PendingNodeSelector = "NodeSelector"
	PendingNotReady     = "NotReady"
	PendingNoAdapter    = "NoAdapter"
	PendingNoVersion    = "NoAdapterVersion"
	PendingFull         = "Full"
	PendingFixture      = "FixtureNotFound"
)

// fitsStatically reports whether the node offers what the run asks for,
// ignoring readiness and load: the adapter, the pinned CLI version and the
// nodeSelector.
func fitsStatically(run *harnessv1.HarnessRun, v nodeView) bool {
	version, ok := v.adapters[run.Spec.Agent.Adapter]
	if !ok || (run.Spec.Agent.Version != "" && version != run.Spec.Agent.Version) {
		return false
	}
	return selects(run.Spec.NodeSelector, v.labels)
}

// selects reports whether a node with nodeLabels matches selector, a
// nodeSelector: every key present with the same value. It is what
// labels.SelectorFromSet(selector).Matches says, without building a
// selector: a freed slot judges every waiting run against its node.
func selects(selector, nodeLabels map[string]string) bool {
	for k, v := range selector {
		if got, ok := nodeLabels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// filterNodes keeps the nodes a run may be bound to, load aside. When none is
// left it says why, in plain words, naming the first rule that left no node:
// nodeSelector, readiness, adapter, adapter version.
func filterNodes(run *harnessv1.HarnessRun, nodes []nodeView) (fit []nodeView, reason, message string) {
	if len(nodes) == 0 {
		return nil, PendingNoNodes, "no HarnessNode is registered: no node-agent is running"
	}
	var matching []nodeView
	for _, n := range nodes {
		if selects(run.Spec.NodeSelector, n.labels) {
			matching = append(matching, n)
		}
	}
	if len(matching) == 0 {
		return nil, PendingNodeSelector, fmt.Sprintf("nodeSelector matches no node: none of the %s has the labels %s",
			plural(len(nodes), "node"), labels.Set(run.Spec.NodeSelector).String())
	}
	var ready []nodeView
	for _, n := range matching {
		if n.ready {
			ready = append(ready, n)
		}
	}
	if len(ready) == 0 {
		return nil, PendingNotReady, fmt.Sprintf("no Ready node: none of the %s%s is Ready (heartbeating, not cordoned, with slots)",
			plural(len(matching), "node"), selectorPhrase(run))
	}
	adapter := run.Spec.Agent.Adapter
	var withAdapter []nodeView
	var versions []string
	for _, n := range ready {
		if v, ok := n.adapters[adapter]; ok {
			withAdapter = append(withAdapter, n)
			if v != "" && !slices.Contains(versions, v) {
				versions = append(versions, v)
			}
		}
	}
	if len(withAdapter) == 0 {
		return nil, PendingNoAdapter, fmt.Sprintf("no Ready node%s has adapter %s", selectorPhrase(run), adapter)
	}
	if want := run.Spec.Agent.Version; want != "" {
		var pinned []nodeView
		for _, n := range withAdapter {
			if n.adapters[adapter] == want {
				pinned = append(pinned, n)
			}
		}
		if len(pinned) == 0 {
			sort.Strings(versions)
			return nil, PendingNoVersion, fmt.Sprintf("no Ready node%s has adapter %s at version %s (Ready nodes have %s)",
				selectorPhrase(run), adapter, want, strings.Join(versions, ", "))
		}
		withAdapter = pinned
	}
	return withAdapter, "", ""
}

func selectorPhrase(run *harnessv1.HarnessRun) string {
	if len(run.Spec.NodeSelector) == 0 {
		return ""
	}
	return " matching nodeSelector " + labels.Set(run.Spec.NodeSelector).String()
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// pendingQuietFor is how long a new run waits for a free slot on a full
// node before its status says Pending (Unschedulable, naming the full nodes)
// and an Event says so. A run bound within it is spared that status write
// (its first, which would also carry the Finished condition) and that
// Event: in a burst of runs (a suite's, or many authors') most of
// them wait a fraction of a second, and two writes each for that are API
// load the bindings themselves wait behind (BenchmarkNodeAgentThroughput:
// 0.4 of each per run). Meanwhile its status shows no phase, which reads as
// Pending (effectivePhase). A run that fits no node, or waits for its
// namespace's share or budget, is told at once: that is not a slot away.
const pendingQuietFor = time.Second

// reconcileDispatch binds a Pending run to the least-loaded node that fits
// it, or says in the run's status why none does.
//
// Choosing and reserving happen under the ledger's lock, counting each
// node's load as the runs the cache shows bound to it plus the bindings this
// controller made (or is making) that the cache does not show yet (see
// bindingLedger). So two
// workers, or one worker with a stale cache, never give the same slot twice;
// the status write itself carries the resourceVersion that was read, so the
// same run is never bound twice either (a stale read fails with a conflict).
func (r *HarnessRunReconciler) reconcileDispatch(ctx context.Context, p *pass) error {
	run := p.run
	if effectivePhase(run) != harnessv1.RunPending || stopReason(run) != "" {
		return nil
	}
	key := client.ObjectKeyFromObject(run)
	// Judged again now: a freed slot or share may wake it again
	// (wakeOldest, wakeForShare).
	defer r.ledger.dispatched(key)
	if _, ok := r.ledger.reservedFor(key); ok {
		// An earlier pass bound it and the cache has not caught up; its
		// update event brings the run back. Look again when the
		// reservation would expire, in case that write never landed.
		p.requeue(r.opts.ReservationTTL)
		return nil
	}
	policies, err := r.namespacePolicies(ctx, run.Namespace)
	if err != nil {
		return err
	}
	if v := policyViolations(run, policies); len(v) > 0 {
		p.fail(harnessv1.ReasonPolicyViolation, "refused by the namespace's HarnessPolicies before binding: "+strings.Join(v, "; "), "", "")
		return nil
	}
	spent, err := r.spendExhausted(ctx, run, policies) // harnessrun_spend.go
	if err != nil {
		return err
	}
	views, err := r.nodes.read(ctx, r.nodeReader(), p.now.Time)
	if err != nil {
		return err
	}
	fit, reason, message := filterNodes(run, views)
	var chosen *nodeView
	inUse, total := int32(0), int32(0)
	if len(fit) > 0 && spent != "" {
		// A budget used up is a queue, like fair share: the run goes when
		// an operator raises the budget (or resets the count).
		reason, message = PendingSpend, spent
	} else if len(fit) > 0 {
		limit, policy := fairShareLimit(policies)
		var inFlight int32
		chosen, inUse, total, inFlight = r.ledger.reserve(key, fit, limit)
		switch {
		case chosen == nil && limit > 0 && inFlight >= limit:
			reason = PendingFairShare
			message = fmt.Sprintf("namespace %s has %s on nodes, as many as HarnessPolicy %s allows (fairShare.maxRunsInFlight %d): the run waits for one to finish",
				run.Namespace, plural(int(inFlight), "run"), policy, limit)
		case chosen == nil:
			reason = PendingFull
			message = fmt.Sprintf("all %d matching nodes are full (%d of %d slots in use)", len(fit), inUse, total)
			if len(fit) == 1 {
				message = fmt.Sprintf("the only matching node, %s, is full (%d of %d slots in use)", fit[0].name, inUse, total)
			}
		}
	}
	if chosen != nil {
		// Looked at only once a slot is held, so that runs queued behind
		// full nodes cost the API server nothing each time a slot frees.
		missing, err := r.fixtureMissing(ctx, run)
		if err != nil || missing != "" {
			r.ledger.release(key, chosen.name)
		}
		if err != nil {
			return err
		}
		if missing != "" {
			waited := p.now.Sub(r.ledger.pendingSince(key, run))
			if waited >= r.opts.FixtureGrace {
				// Not a Pod's endless wait: every run ends, with its
				// reason, and a name that is wrong stays wrong.
				p.fail(harnessv1.ReasonBadFixture, fmt.Sprintf("%s, and it did not appear within %s", missing, r.opts.FixtureGrace),
					harnessv1.VerdictError, harnessv1.FailureInfrastructure)
				return nil
			}
			chosen, reason = nil, PendingFixture
			message = fmt.Sprintf("%s yet: the run waits up to %s for it", missing, r.opts.FixtureGrace)
			p.requeue(min(r.opts.FixtureGrace-waited, 2*time.Second))
		}
	}

	st := &p.run.Status
	if chosen == nil {
		r.ledger.setPending(key, reason)
		// Timed on this controller's clock alone, from when it first saw
		// the run: the creation time is the API server's, and a clock
		// behind it would stretch the quiet second by the difference.
		if seen, ok := r.ledger.firstSeenWaiting(key); ok && st.Phase == "" && reason == PendingFull {
			if wait := pendingQuietFor - p.now.Sub(seen); wait > 0 {
				// Only waiting for a slot, and not for long yet: the
				// queue of a busy node, which the next free slot may
				// end before anyone looks (a slot's freeing wakes the
				// run). The status and Event come if it still waits.
				p.quiet = true
				p.requeue(wait)
				return nil
			}
		}
		if st.Phase == "" {
			p.event(corev1.EventTypeWarning, harnessv1.ReasonUnschedulable, "Schedule", message, nil)
		}
		st.Phase = harnessv1.RunPending
		st.Reason = harnessv1.ReasonUnschedulable
		st.Message = message
		p.setCondition(harnessv1.ConditionScheduled, metav1.ConditionFalse, harnessv1.ReasonUnschedulable, message)
		p.setCondition(harnessv1.ConditionReady, metav1.ConditionFalse, harnessv1.ReasonPending, "the run waits for a node: "+message)
		return nil
	}

	p.reserved = chosen.name
	p.scheduled = true
	if !controllerutil.ContainsFinalizer(run, harnessv1.RunFinalizer) {
		// From now on a node-agent may hold the run: deleting it must wait
		// for it to let go.
		if err := r.patchFinalizer(ctx, p, true); err != nil {
			return err
		}
	}
	p.pendingSince = r.ledger.pendingSince(key, run)
	st.Phase = harnessv1.RunScheduled
	st.NodeName = chosen.name
	st.Attempt = max(st.Attempt, 1)
	st.ScheduledTime = p.now.DeepCopy()
	st.StartTime = nil
	// The node-agent judges the limits it resolves from the fixture and
	// the defaults against the ceilings of now; the attempt's limits are
	// its own to record.
	st.LimitCeilings = harnessv1.Ceilings(policies)
	// Likewise the names its egress may reach at inside addresses: the
	// policies' of now, where the node-agent reads them and the run's
	// author cannot write.
	st.InsideHosts = harnessv1.InsideHosts(policies)
	st.Limits, st.LimitSources = nil, nil
	st.Reason = harnessv1.ReasonBound
	msg := fmt.Sprintf("bound to node %s (attempt %d)", chosen.name, st.Attempt)
	st.Message = msg
	p.setCondition(harnessv1.ConditionScheduled, metav1.ConditionTrue, harnessv1.ReasonBound, msg)
	p.setCondition(harnessv1.ConditionReady, metav1.ConditionFalse, harnessv1.ReasonBound, "waiting for the node-agent on "+chosen.name+" to start the run")
	node := &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: chosen.name}}
	node.SetGroupVersionKind(harnessv1.GroupVersion.WithKind("HarnessNode"))
	p.event(corev1.EventTypeNormal, string(harnessv1.RunScheduled), "Bind", msg, node)
	return nil
}

// fixtureMissing says why a run whose fixture is a ConfigMap cannot be bound:
// that ConfigMap does not exist. `kubectl apply -f` of a folder, Flux or
// Argo CD may create the run a moment before its fixture; the controller
// waits Options.FixtureGrace for it, then ends the run BadFixture itself,
// rather than hand the node-agent a run it can only end so. Only the
// metadata is read, from the API server (the cache holds suites' fixtures
// alone): one GET a binding.
func (r *HarnessRunReconciler) fixtureMissing(ctx context.Context, run *harnessv1.HarnessRun) (string, error) {
	ref := run.Spec.Fixture.ConfigMapRef
	if ref == nil {
		return "", nil
	}
	cm := &metav1.PartialObjectMetadata{}
	cm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	switch err := r.opts.FixtureReader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: ref.Name}, cm); {
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("the fixture ConfigMap %s (spec.fixture.configMapRef.name) does not exist in namespace %s", ref.Name, run.Namespace), nil
	case apierrors.IsForbidden(err):
		// The controller's RBAC does not reach the namespace's ConfigMaps
		// (an operator's narrower role): the look is not made, loudly, and
		// the node-agent's read of the fixture (through the run source)
		// ends the run with its reason, rather than the run waiting on an
		// error for ever.
		log.FromContext(ctx).Error(err, "cannot look for the run's fixture ConfigMap before binding it; binding it anyway", "run", client.ObjectKeyFromObject(run))
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading the fixture ConfigMap %s/%s: %w", run.Namespace, ref.Name, err)
	}
	return "", nil
}
