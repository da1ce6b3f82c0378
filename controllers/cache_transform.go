package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// Metadata is the run author's too: the API server bounds a label only by
// its key and value (a ConfigMap or a run may carry a mebibyte of labels),
// annotations by 256 KiB in all, and owner references not at all. So the
// cache keeps of either only the metadata the controller reads:
//
//   - of a fixture ConfigMap, its own annotation and no owner references
//     or finalizers (the controller never writes one); its labels while
//     they are at most MaxCachedLabelBytes, which every selector a person
//     writes needs far less than, else only harnessfacts.io/fixture and
//     the annotation CachedLabelsDroppedAnnotation: no suite's selector
//     selects such a ConfigMap (a name in fixtures.names still does);
//   - of a HarnessRun, only the harnessfacts.io labels and annotations the
//     controller reads (cachedRunLabels, cachedRunAnnotations) and only
//     its controller reference (a suite's). Its finalizers are kept whole:
//     the controller's finalizer patch writes the list it read;
//   - of a HarnessSuite, none of its metadata (its spec is kept whole: the
//     controller makes its runs from it).
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
	ann := map[string]string{CachedFixtureHashAnnotation: hash}
	if labelBytes(cm.Labels) > MaxCachedLabelBytes {
		cm.Labels = map[string]string{harnessv1.LabelFixture: cm.Labels[harnessv1.LabelFixture]}
		ann[CachedLabelsDroppedAnnotation] = "true"
	}
	cm.Annotations = ann
	cm.OwnerReferences, cm.Finalizers, cm.ManagedFields = nil, nil, nil
	return cm, nil
}

// MaxCachedLabelBytes is the most label bytes (keys and values) of a
// fixture ConfigMap the controller's cache keeps.
const MaxCachedLabelBytes = 16 << 10

// CachedLabelsDroppedAnnotation marks, on a fixture ConfigMap in the
// controller's cache, one whose labels were over MaxCachedLabelBytes and
// are not kept: no selector selects it.
const CachedLabelsDroppedAnnotation = "harnessfacts.io/cached-labels-dropped"

// labelsDropped says whether the cache left out cm's labels.
func labelsDropped(cm *corev1.ConfigMap) bool {
	return hashedOnly(cm) && cm.Annotations[CachedLabelsDroppedAnnotation] == "true"
}

func labelBytes(labels map[string]string) int {
	n := 0
	for k, v := range labels {
		n += len(k) + len(v)
	}
	return n
}

// The labels and annotations of a HarnessRun the controller reads, the only
// ones its cache keeps.
var (
	cachedRunLabels = []string{harnessv1.LabelSuite, harnessv1.LabelSuiteRound, harnessv1.LabelSuiteAgent,
		harnessv1.LabelSuiteFixture, harnessv1.LabelRetryOf}
	cachedRunAnnotations = []string{harnessv1.AnnotationFixtureHash, harnessv1.AnnotationSuiteRepeat, harnessv1.AnnotationRetryOfUID}
)

// only is m's entries under keys (nil when none).
func only(m map[string]string, keys []string) map[string]string {
	var out map[string]string
	for _, k := range keys {
		if v, ok := m[k]; ok {
			if out == nil {
				out = make(map[string]string, len(keys))
			}
			out[k] = v
		}
	}
	return out
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
	if transformedRun(run) {
		// The cache transforms the objects of its first list twice
		// (client-go's informer, as of v0.37): a second pass would take
		// the digest of the spec it stripped, and lose the place of
		// RunFinalizer it noted.
		return obj, nil
	}
	ann := only(run.Annotations, cachedRunAnnotations)
	if ann == nil {
		ann = map[string]string{}
	}
	ann[CachedRunWorkAnnotation] = uncachedWork(&run.Spec)
	run.Annotations = ann
	run.Labels = only(run.Labels, cachedRunLabels)
	var owners []metav1.OwnerReference
	if ref := metav1.GetControllerOfNoCopy(run); ref != nil {
		owners = []metav1.OwnerReference{*ref}
	}
	run.OwnerReferences = owners
	if len(run.Finalizers) > MaxCachedFinalizers {
		// Of a long list only RunFinalizer and where it stands are kept:
		// patchFinalizer then adds or removes it by a JSON patch that
		// needs no more of the list.
		at := slices.Index(run.Finalizers, harnessv1.RunFinalizer)
		run.Finalizers = nil
		if at >= 0 {
			run.Finalizers = []string{harnessv1.RunFinalizer}
		}
		ann[CachedFinalizerIndexAnnotation] = strconv.Itoa(at)
	}
	stripUncached(&run.Spec)
	run.ManagedFields = []metav1.ManagedFieldsEntry{}
	return run, nil
}

// transformedRun says whether run is what cachedRun made: managed fields
// that are an empty list and not nil, which the API server never sends (it
// leaves the field out, or lists at least one manager), so a run author
// cannot make a run pass for one.
func transformedRun(run *harnessv1.HarnessRun) bool {
	return run.ManagedFields != nil && len(run.ManagedFields) == 0
}

// MaxCachedFinalizers is the most finalizers of a HarnessRun the
// controller's cache keeps whole: the API server bounds their number by
// nothing but the object's size, and a run author may add any (a
// mebibyte of them on each run would fill the controller's memory).
const MaxCachedFinalizers = 8

// CachedFinalizerIndexAnnotation marks, on a HarnessRun in the controller's
// cache, one whose finalizers were more than MaxCachedFinalizers and are
// not kept but for RunFinalizer: its value is where RunFinalizer stands in
// the run's list (-1 when it is not there).
const CachedFinalizerIndexAnnotation = "harnessfacts.io/cached-finalizer-index"

// cachedSuite is the cache's transform of a HarnessSuite: the controller
// reads its spec and status, never its labels, annotations, owners or
// finalizers (it writes only its status, by a patch of what changed).
func cachedSuite(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
		m.SetLabels(nil)
		m.SetAnnotations(nil)
		m.SetOwnerReferences(nil)
		m.SetFinalizers(nil)
	}
	return obj, nil
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

// cachedNode keeps of a Node its name and labels, which spec.nodeSelector is
// matched against (nodeReader.labelsOf): a Node's status (its images, its
// conditions) is most of its size and never read.
func cachedNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels,
	}}, nil
}
