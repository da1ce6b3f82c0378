package controllers

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

// Reasons of the Events about stored evidence.
const (
	ReasonEvidenceStored    = "EvidenceStored"
	ReasonEvidenceNotStored = "EvidenceNotStored"
)

// storeRetry is how soon a failed push is tried again.
const storeRetry = 30 * time.Second

// storeEvidence pushes a finished run's evidence to the operator's
// evidence repository as an OCI artifact and records where in
// status.evidence.storedRef, in one status write. It reports whether it
// wrote. Evidence that does not match the run's status.evidence.digest is
// not stored (it was changed after the node-agent wrote it); a failed push
// is a Warning Event and is tried again, until the run goes.
func (r *HarnessRunReconciler) storeEvidence(ctx context.Context, p *pass) (bool, error) {
	run := p.run
	ev := run.Status.Evidence
	if r.opts.EvidenceRepository == "" || r.opts.EvidenceReader == nil || !run.Status.Phase.Terminal() ||
		run.DeletionTimestamp != nil || ev == nil || ev.ConfigMapName == "" || ev.Digest == "" || ev.StoredRef != "" {
		return false, nil
	}
	warn := func(format string, args ...any) (bool, error) {
		msg := fmt.Sprintf(format, args...)
		log.FromContext(ctx).Info("evidence not stored", "run", run.Namespace+"/"+run.Name, "why", msg)
		r.recorder.Eventf(run, nil, corev1.EventTypeWarning, ReasonEvidenceNotStored, "StoreEvidence", "%s", msg)
		p.requeue(storeRetry)
		return false, nil
	}
	cm := &corev1.ConfigMap{}
	if err := r.opts.EvidenceReader.Get(ctx, types.NamespacedName{Namespace: run.Namespace, Name: ev.ConfigMapName}, cm); err != nil {
		return warn("reading the evidence ConfigMap %s: %v", ev.ConfigMapName, err)
	}
	if rep := evidence.VerifyConfigMap(cm.Data, cm.BinaryData, ev.Digest); !rep.OK() {
		return warn("the evidence ConfigMap %s does not match the run's digest, so it is not stored: %v", ev.ConfigMapName, rep.Err())
	}
	b, err := evidence.FromConfigMap(cm.Data, cm.BinaryData)
	if err != nil {
		return warn("reading the evidence ConfigMap %s: %v", ev.ConfigMapName, err)
	}
	pushCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ref, err := b.Push(pushCtx, r.opts.EvidenceRepository+":"+storedTag(run))
	if err != nil {
		return warn("%v", err)
	}
	ev.StoredRef = ref
	if err := r.writeStatus(ctx, p); err != nil {
		return true, err
	}
	r.recorder.Eventf(run, nil, corev1.EventTypeNormal, ReasonEvidenceStored, "StoreEvidence", "evidence %s stored as %s", ev.Digest, ref)
	return true, nil
}

var notTag = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// storedTag names a run's attempt in the repository: namespace, name,
// attempt and the start of the UID, within a tag's 128 characters.
func storedTag(run *harnessv1.HarnessRun) string {
	name := run.Name
	if len(name) > 80 {
		name = name[:80]
	}
	uid := strings.ReplaceAll(string(run.UID), "-", "")
	if len(uid) > 12 {
		uid = uid[:12]
	}
	return notTag.ReplaceAllString(fmt.Sprintf("%s.%s.%d.%s", run.Namespace, name, run.Status.Attempt, uid), "_")
}
