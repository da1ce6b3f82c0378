package nodeagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
)

// finish writes the evidence ConfigMap (owned by the run) and then the
// terminal status, in one status write, once the attempt's cleanup, begun
// beside the evidence's write, is done: a terminal status frees the run's
// slot, and nothing of the run may outlive it.
func (a *Agent) finish(ctx context.Context, run *harnessv1.HarnessRun, r *running, res *executor.Outcome) error {
	key := keyOf(run)
	// From now on only this writes the attempt's status.
	r.writeMu.Lock()
	r.ended = true
	last := r.last
	r.writeMu.Unlock()
	if res.Evidence != nil {
		var name string
		err := durably(ctx, func() (err error) {
			name, err = a.writeEvidence(ctx, run, res.Evidence)
			return err
		})
		if err != nil {
			// The receipt digest stays in status; the evidence itself is
			// lost, and status says so.
			res.Status.Message += "; writing the evidence ConfigMap failed: " + err.Error()
		} else if res.Status.Evidence != nil {
			res.Status.Evidence.ConfigMapName = name
		}
	}
	res.WaitCleaned()
	var written *harnessv1.HarnessRun
	// The first try writes over the run as this process last wrote it (the
	// claim, or its limits); only when someone else changed it since is it
	// read again.
	cur := last.DeepCopy()
	fresh := false
	err := durably(ctx, func() error {
		return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
			if fresh {
				cur = &harnessv1.HarnessRun{}
				if err := a.client.Get(ctx, key, cur); err != nil {
					return err
				}
			}
			fresh = true
			if cur.UID != run.UID || cur.Status.Attempt != run.Status.Attempt || cur.Status.Phase.Terminal() ||
				cur.Status.NodeName != a.opts.NodeName {
				return nil // the controller already ended or rebound this attempt
			}
			res.Apply(cur, a.opts.Clock.Now())
			// A message over its schema bound would fail the whole write, and
			// the run could never end.
			cur.Status.Fit()
			if err := a.client.Status().Update(ctx, cur); err != nil {
				return err
			}
			written = cur
			return nil
		})
	})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("writing the outcome of %s: %w", key, err)
	}
	if written == nil {
		return nil
	}
	eventType := corev1.EventTypeNormal
	if written.Status.Verdict != harnessv1.VerdictPass {
		eventType = corev1.EventTypeWarning
	}
	a.recorder.Eventf(written, nil, eventType, string(written.Status.Phase), "Finish", "%s", written.Status.Message)
	for _, w := range res.Warnings {
		a.recorder.Eventf(written, nil, corev1.EventTypeWarning, w.Reason, "Execute", "%s", w.Message)
	}
	return nil
}

// durably runs write until it succeeds, fails for good, or ctx ends. An
// attempt's outcome is written once: a write the API server could not take
// just then (a webhook down, etcd electing a leader, a connection reset by
// a rolling update) threw it away, and the run, whose agent and checks had
// passed, sat Running until the controller's deadline ended it as a
// Timeout. What the API server refused for good (the run is gone, the
// write is invalid or not allowed) is not asked again. A write that
// failed halfway is safe to repeat: the evidence is created or replaced
// whole, and the status is read again before it is written.
func durably(ctx context.Context, write func() error) error {
	delay := 250 * time.Millisecond
	for {
		err := write()
		if err == nil || !transient(err) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 10*time.Second)
	}
}

// transient says whether a write that failed with err may succeed later.
func transient(err error) bool {
	switch {
	case apierrors.IsNotFound(err), apierrors.IsInvalid(err), apierrors.IsBadRequest(err),
		apierrors.IsForbidden(err), apierrors.IsMethodNotSupported(err), apierrors.IsRequestEntityTooLargeError(err):
		return false
	}
	return true
}

// writeEvidence creates (or, for a retried write, updates) the run's
// evidence ConfigMap, owned by the run so it goes when the run goes.
func (a *Agent) writeEvidence(ctx context.Context, run *harnessv1.HarnessRun, ev *executor.Evidence) (string, error) {
	fill := func(cm *corev1.ConfigMap) error {
		cm.Labels = map[string]string{
			LabelRunUID:  string(run.UID),
			LabelAttempt: fmt.Sprint(run.Status.Attempt),
			// Who wrote it: the admission policy lets a node-agent write
			// only evidence labelled with its own node.
			LabelNode: a.opts.NodeName,
		}
		cm.Data, cm.BinaryData = ev.Data, ev.BinaryData
		cm.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(run, harnessv1.GroupVersion.WithKind("HarnessRun"))}
		return nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: EvidenceName(run), Namespace: run.Namespace}}
	if err := fill(cm); err != nil {
		return "", err
	}
	// Create first: the ConfigMap exists already only when an earlier
	// write of this same outcome was cut off. Then it is replaced whole
	// (an update without resourceVersion): the node-agent may not read
	// ConfigMaps, and the admission policy lets it replace only evidence.
	err := a.client.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: EvidenceName(run), Namespace: run.Namespace}}
		if err = fill(cm); err == nil {
			err = a.client.Update(ctx, cm)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			// Someone who may write ConfigMaps in the namespace made one
			// of that name first (immutable, or not this run's, which the
			// admission policy keeps this node-agent from replacing): the
			// evidence gets a name of its own, which status records.
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: EvidenceName(run) + "-", Namespace: run.Namespace}}
			if err = fill(cm); err == nil {
				err = a.client.Create(ctx, cm)
			}
		}
	}
	return cm.Name, err
}

// Labels on evidence ConfigMaps.
const (
	LabelRunUID = "harnessfacts.io/run-uid"
	// LabelNode names the node whose node-agent wrote the evidence; it must
	// be the run's status.nodeName.
	LabelNode    = "harnessfacts.io/node"
	LabelAttempt = "harnessfacts.io/attempt"
)

// EvidenceName is the name of the evidence ConfigMap of the run's current
// attempt. A name too long for the suffix is cut and given a digest of the
// whole name: two runs whose names share their first 230 characters must
// not share (and overwrite) one evidence ConfigMap. The cut form ends in
// ".evidence-N", which no run's own name with "-evidence-N" does: a run
// named as the cut form of another's long name would otherwise share its
// evidence ConfigMap.
func EvidenceName(run *harnessv1.HarnessRun) string {
	suffix := fmt.Sprintf("-evidence-%d", run.Status.Attempt)
	name := run.Name
	if len(name)+len(suffix) > 253 {
		sum := sha256.Sum256([]byte(run.Name))
		tag := "-" + hex.EncodeToString(sum[:])[:12]
		// Cut where a DNS subdomain may go on with "-".
		name = strings.TrimRight(name[:253-len(suffix)-len(tag)], ".-") + tag
		suffix = "." + suffix[1:]
	}
	return name + suffix
}
