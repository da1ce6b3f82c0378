package controllers

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Cache indexes of HarnessRuns. Every lookup the controller makes goes
// through one of them, so no reconcile lists all runs.
const (
	// IndexRunActiveNode maps a node name to the runs bound to it that are
	// not terminal: the node's load, and the runs that node loss ends.
	IndexRunActiveNode = "harnessfacts.io/active-node"
	// IndexRunPhase maps a phase to its runs; a run without a phase yet is
	// indexed as Pending.
	IndexRunPhase = "harnessfacts.io/phase"
	// IndexRunSuite maps a HarnessSuite's UID to the runs it owns (its
	// controller owner reference): a suite's runs, without listing the
	// namespace's.
	IndexRunSuite = "harnessfacts.io/suite"
)

// SetupIndexes registers the cache indexes the reconcilers use.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &harnessv1.HarnessRun{}, IndexRunActiveNode, activeNodeKey); err != nil {
		return fmt.Errorf("indexing HarnessRuns by active node: %w", err)
	}
	if err := indexer.IndexField(ctx, &harnessv1.HarnessRun{}, IndexRunPhase, phaseKey); err != nil {
		return fmt.Errorf("indexing HarnessRuns by phase: %w", err)
	}
	if err := indexer.IndexField(ctx, &harnessv1.HarnessRun{}, IndexRunSuite, suiteKey); err != nil {
		return fmt.Errorf("indexing HarnessRuns by suite: %w", err)
	}
	return nil
}

func suiteKey(obj client.Object) []string {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "HarnessSuite" || ref.APIVersion != harnessv1.GroupVersion.String() {
		return nil
	}
	return []string{string(ref.UID)}
}

func activeNodeKey(obj client.Object) []string {
	run, ok := obj.(*harnessv1.HarnessRun)
	if !ok || run.Status.NodeName == "" || run.Status.Phase.Terminal() {
		return nil
	}
	return []string{run.Status.NodeName}
}

func phaseKey(obj client.Object) []string {
	run, ok := obj.(*harnessv1.HarnessRun)
	if !ok {
		return nil
	}
	return []string{string(effectivePhase(run))}
}

// effectivePhase is the run's phase, Pending for a run the controller has
// not written yet.
func effectivePhase(run *harnessv1.HarnessRun) harnessv1.RunPhase {
	if run.Status.Phase == "" {
		return harnessv1.RunPending
	}
	return run.Status.Phase
}
