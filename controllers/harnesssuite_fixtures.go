package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// maxSuiteFixtures bounds the fixtures of one suite (status.fixtures).
const maxSuiteFixtures = 64

// suiteFixture is one fixture ConfigMap a suite uses, with its content hash.
type suiteFixture struct {
	name string
	hash string
}

// FixtureHash is "sha256:<hex>" over a fixture ConfigMap's content: every
// key of data and binaryData, sorted, each length-prefixed with its value.
// Labels, annotations and the name do not count, so the same files give the
// same hash in every round, whatever kustomize named the ConfigMap.
func FixtureHash(cm *corev1.ConfigMap) string {
	h := sha256.New()
	write := func(kind byte, key string, value []byte) {
		var n [8]byte
		h.Write([]byte{kind})
		binary.BigEndian.PutUint64(n[:], uint64(len(key)))
		h.Write(n[:])
		h.Write([]byte(key))
		binary.BigEndian.PutUint64(n[:], uint64(len(value)))
		h.Write(n[:])
		h.Write(value)
	}
	keys := make([]string, 0, len(cm.Data))
	for k := range cm.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		write('d', k, []byte(cm.Data[k]))
	}
	keys = keys[:0]
	for k := range cm.BinaryData {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		write('b', k, cm.BinaryData[k])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// roundRuns is how many runs a round of suite has with fixtures fixtures.
func roundRuns(suite *harnessv1.HarnessSuite, fixtures int) int64 {
	return int64(len(suite.Spec.Agents)) * int64(fixtures) * int64(max(suite.Spec.Repeats, 1))
}

// resolveFixtures finds the suite's fixture ConfigMaps (from the cache of
// labelled ConfigMaps) and hashes them, sorted by name. problem, when not
// empty, says in plain words why the round cannot go on (a named fixture is
// missing, the selector matches none or too many). It also updates
// status.fixtures: the round's first hash of each fixture, and whether it
// changed since.
func (r *HarnessSuiteReconciler) resolveFixtures(ctx context.Context, p *suitePass) ([]suiteFixture, string, error) {
	suite := p.suite
	var cms []*corev1.ConfigMap
	var problem string
	switch {
	case suite.Spec.Fixtures.Selector != nil:
		sel, err := metav1.LabelSelectorAsSelector(suite.Spec.Fixtures.Selector)
		if err != nil {
			return nil, fmt.Sprintf("fixtures.selector is not a valid selector: %v", err), nil
		}
		req, _ := labels.NewRequirement(harnessv1.LabelFixture, selection.Equals, []string{"true"})
		list := &corev1.ConfigMapList{}
		if err := r.client.List(ctx, list, client.InNamespace(suite.Namespace),
			client.MatchingLabelsSelector{Selector: sel.Add(*req)}, client.UnsafeDisableDeepCopy); err != nil {
			return nil, "", fmt.Errorf("listing the fixtures of HarnessSuite %s/%s: %w", suite.Namespace, suite.Name, err)
		}
		for i := range list.Items {
			// Its labels are not in the cache: it matched a selector
			// with only its fixture label, which it would not have whole.
			if labelsDropped(&list.Items[i]) {
				continue
			}
			cms = append(cms, &list.Items[i])
		}
		switch {
		case len(cms) == 0:
			problem = fmt.Sprintf("no ConfigMap labelled %s=true matches fixtures.selector", harnessv1.LabelFixture)
		case len(cms) > maxSuiteFixtures:
			problem = fmt.Sprintf("fixtures.selector matches %d ConfigMaps; a suite may have at most %d fixtures", len(cms), maxSuiteFixtures)
			cms = nil
		case roundRuns(suite, len(cms)) > harnessv1.MaxRoundRuns:
			// The schema counts a selector as one fixture: it cannot
			// know how many match.
			problem = fmt.Sprintf("fixtures.selector matches %d ConfigMaps: %d agents × %d fixtures × %d repeats is %d runs a round, more than the %d a round may have",
				len(cms), len(suite.Spec.Agents), len(cms), suite.Spec.Repeats, roundRuns(suite, len(cms)), harnessv1.MaxRoundRuns)
			cms = nil
		}
	default:
		var missing []string
		for _, name := range suite.Spec.Fixtures.Names {
			cm := &corev1.ConfigMap{}
			err := r.client.Get(ctx, types.NamespacedName{Namespace: suite.Namespace, Name: name}, cm, client.UnsafeDisableDeepCopy)
			switch {
			case apierrors.IsNotFound(err) || err == nil && cm.Labels[harnessv1.LabelFixture] != "true":
				missing = append(missing, name)
			case err != nil:
				return nil, "", fmt.Errorf("getting fixture %s of HarnessSuite %s/%s: %w", name, suite.Namespace, suite.Name, err)
			default:
				cms = append(cms, cm)
			}
		}
		if len(missing) > 0 {
			problem = fmt.Sprintf("fixture ConfigMaps not found (or without the label %s=true): %s", harnessv1.LabelFixture, strings.Join(missing, ", "))
		}
	}

	fixtures := make([]suiteFixture, 0, len(cms))
	for _, cm := range cms {
		fixtures = append(fixtures, suiteFixture{name: cm.Name, hash: fixtureHash(cm)})
	}
	sort.Slice(fixtures, func(i, j int) bool { return fixtures[i].name < fixtures[j].name })
	p.suite.Status.Fixtures = fixtureStatuses(p.suite, fixtures)
	return fixtures, problem, nil
}

// fixtureStatuses is status.fixtures for the fixtures found now: a fixture
// keeps the hash the round first saw (roundHash), and changedInRound stays
// true once its content differed from it while the round had runs to
// create.
func fixtureStatuses(suite *harnessv1.HarnessSuite, fixtures []suiteFixture) []harnessv1.FixtureStatus {
	prev := map[string]harnessv1.FixtureStatus{}
	for _, f := range suite.Status.Fixtures {
		prev[f.Name] = f
	}
	var previousRound map[string]string
	if len(suite.Status.Rounds) > 0 {
		previousRound = suite.Status.Rounds[0].FixtureHashes
	}
	out := make([]harnessv1.FixtureStatus, 0, len(fixtures))
	for _, f := range fixtures {
		st := harnessv1.FixtureStatus{Name: f.name, Hash: f.hash, RoundHash: f.hash}
		if old, ok := prev[f.name]; ok && old.RoundHash != "" {
			st.RoundHash = old.RoundHash
			// A change after the round completed touches none of its runs.
			st.ChangedInRound = old.ChangedInRound || suite.Status.CompletionTime == nil && old.RoundHash != f.hash
		}
		st.UnchangedSincePreviousRound = previousRound != nil && previousRound[f.name] == f.hash
		out = append(out, st)
	}
	return out
}
