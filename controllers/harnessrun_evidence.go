package controllers

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/runsource"
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
// wrote. Evidence that does not match the run's status.evidence.digest, or
// whose envelope is not signed by the key status.evidence.signedBy names
// (or is there at all when that is empty), is not stored: it was changed
// after the node-agent wrote it. A refusal or a failed push is a Warning
// Event and is tried again, until the run goes.
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
	// receipt.dsse.json is outside the digest: without the key, a run
	// author could swap the node's signature for their own before the
	// copy that outlives the run is made.
	var keys []*evidence.PublicKey
	if ev.SignedBy != "" {
		key, err := r.signerKey(ctx, run)
		if err != nil {
			return warn("the evidence ConfigMap %s is not stored: its signature cannot be checked: %v", ev.ConfigMapName, err)
		}
		keys = append(keys, key)
	}
	rep := evidence.VerifyConfigMap(cm.Data, cm.BinaryData, ev.Digest, keys...)
	if !rep.OK() {
		return warn("the evidence ConfigMap %s does not match the run's digest and signer, so it is not stored: %v", ev.ConfigMapName, rep.Err())
	}
	if ev.SignedBy == "" && rep.Signed {
		return warn("the evidence ConfigMap %s carries a signature (%s), but the run's evidence is unsigned (status.evidence.signedBy is empty), so it is not stored",
			ev.ConfigMapName, evidence.EnvelopeName)
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

// signerKey is the public key that status.evidence.signedBy names: the
// published key of the HarnessNode that ran the attempt, bound to that
// node as a trusted-keys file's "Node:" header binds it (so the receipt
// must say that node), or the public part of the operator's signing key.
// Both are read fresh through EvidenceReader, once per stored run. A
// signer that is neither (the node's key changed since, or the operator's
// Secret did) is an error: the gate cannot vouch for the copy.
func (r *HarnessRunReconciler) signerKey(ctx context.Context, run *harnessv1.HarnessRun) (*evidence.PublicKey, error) {
	want := run.Status.Evidence.SignedBy
	var known []string
	if name := run.Status.NodeName; name != "" {
		node := &harnessv1.HarnessNode{}
		err := r.opts.EvidenceReader.Get(ctx, types.NamespacedName{Name: name}, node)
		switch {
		case apierrors.IsNotFound(err):
			// A node gone has no key to check with; the operator's may
			// still be the signer.
			known = append(known, fmt.Sprintf("HarnessNode %s is gone", name))
		case err != nil:
			return nil, fmt.Errorf("reading HarnessNode %s: %w", name, err)
		}
		if k := node.Status.EvidenceKey; err == nil && k != nil {
			if k.KeyID == want {
				keys, err := evidence.ParsePublicKeys([]byte(k.PublicKey))
				if err != nil {
					return nil, fmt.Errorf("the published key of HarnessNode %s: %w", name, err)
				}
				if len(keys) != 1 || keys[0].ID != want {
					return nil, fmt.Errorf("the published key of HarnessNode %s is not the key %s its keyID says", name, want)
				}
				keys[0].Node = name
				return keys[0], nil
			}
			known = append(known, fmt.Sprintf("HarnessNode %s publishes %s", name, k.KeyID))
		}
	}
	if ref := r.opts.EvidenceSigningKeySecret; ref != nil {
		sec := &corev1.Secret{}
		if err := r.opts.EvidenceReader.Get(ctx, *ref, sec); err != nil {
			return nil, fmt.Errorf("reading the operator's signing key Secret %s: %w", ref, err)
		}
		key, err := evidence.ParsePrivateKey(sec.Data[runsource.SigningKeyDataKey])
		if err != nil {
			return nil, fmt.Errorf("the operator's signing key Secret %s: %w", ref, err)
		}
		if key.Public().ID == want {
			return key.Public(), nil
		}
		known = append(known, fmt.Sprintf("the operator's key is %s", key.Public().ID))
	}
	if len(known) == 0 {
		known = append(known, "no key is published or configured")
	}
	return nil, fmt.Errorf("status.evidence.signedBy names key %s, which is neither the node's nor the operator's (%s)", want, strings.Join(known, "; "))
}
