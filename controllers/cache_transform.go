package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// What the controller's cache keeps of the objects run authors make. Any
// user who may edit one namespace makes them, as large as the API server
// takes (about 1.5 MiB an object) and as many as the namespace's quota
// allows, and the one controller every namespace depends on caches them
// all: kept whole, a few hundred would fill its memory limit (256Mi in the
// chart) and every tenant's runs would stop with it, crash-looping as its
// cache is listed again at each start. So the cache keeps only what the
// controller reads:
//
//   - of a fixture ConfigMap, its content hash (FixtureHash) in the
//     annotation CachedFixtureHashAnnotation, never its data;
//   - of a HarnessRun, no inline fixture files, prompt or agent command
//     line, which only node-agents read (through the API server), only
//     their digest in the annotation CachedRunWorkAnnotation.
//
// A transform runs on each object as the watch delivers it, so an object's
// content is held only while it is decoded. Managed fields are dropped as
// ManagerOptions' default transform drops them, which a per-object
// transform replaces.

// CachedFixtureHashAnnotation holds, on a fixture ConfigMap in the
// controller's cache, FixtureHash of its data, which the cache does not
// keep. The cache sets it on every object it keeps, over whatever the
// ConfigMap carried.
const CachedFixtureHashAnnotation = "harnessfacts.io/cached-fixture-hash"

// cachedFixture is the cache's transform of a fixture ConfigMap.
func cachedFixture(obj any) (any, error) {
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || hashedOnly(cm) {
		// The cache may transform an object it already did.
		return obj, nil
	}
	hash := FixtureHash(cm)
	cm.Data, cm.BinaryData = nil, map[string][]byte{}
	ann := make(map[string]string, len(cm.Annotations)+1)
	for k, v := range cm.Annotations {
		ann[k] = v
	}
	ann[CachedFixtureHashAnnotation] = hash
	cm.Annotations = ann
	cm.ManagedFields = nil
	return cm, nil
}

// hashedOnly says whether cm is what cachedFixture made: no data, and an
// empty binaryData that is not nil, which the API server never sends (it
// leaves an empty map out), so a ConfigMap cannot pass for one.
func hashedOnly(cm *corev1.ConfigMap) bool {
	return cm.Data == nil && cm.BinaryData != nil && len(cm.BinaryData) == 0
}

// fixtureHash is FixtureHash of a fixture ConfigMap read from the cache
// (from the annotation its transform set), or of one read whole.
func fixtureHash(cm *corev1.ConfigMap) string {
	if h, ok := cm.Annotations[CachedFixtureHashAnnotation]; ok && hashedOnly(cm) {
		return h
	}
	return FixtureHash(cm)
}

// cachedRun is the cache's transform of a HarnessRun.
func cachedRun(obj any) (any, error) {
	run, ok := obj.(*harnessv1.HarnessRun)
	if !ok {
		if m, err := meta.Accessor(obj); err == nil {
			m.SetManagedFields(nil)
		}
		return obj, nil
	}
	run.ManagedFields = nil
	ann := make(map[string]string, len(run.Annotations)+1)
	for k, v := range run.Annotations {
		ann[k] = v
	}
	ann[CachedRunWorkAnnotation] = uncachedWork(&run.Spec)
	run.Annotations = ann
	stripUncached(&run.Spec)
	return run, nil
}

// CachedRunWorkAnnotation holds, on a HarnessRun in the controller's
// cache, uncachedWork of what the cache does not keep of its spec, so a
// suite can tell its own runs (ownRuns). The cache sets it on every run it
// keeps, over whatever the run carried.
const CachedRunWorkAnnotation = "harnessfacts.io/cached-work-digest"

// stripUncached drops what the cache does not keep of a run's spec.
func stripUncached(spec *harnessv1.HarnessRunSpec) {
	if spec.Fixture.Inline != nil {
		spec.Fixture.Inline = &harnessv1.InlineFixture{}
	}
	spec.Fixture.Prompt = ""
	spec.Agent.Command, spec.Agent.ExtraArgs = nil, nil
}

// uncachedWork is a digest of what stripUncached drops.
func uncachedWork(spec *harnessv1.HarnessRunSpec) string {
	b, _ := json.Marshal(struct {
		Command, ExtraArgs []string
		Prompt             string
		Inline             *harnessv1.InlineFixture
	}{spec.Agent.Command, spec.Agent.ExtraArgs, spec.Fixture.Prompt, spec.Fixture.Inline})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
