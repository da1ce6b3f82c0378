package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// markFinished sets the run's Finished condition from its phase: False
// before the end, True with the verdict as reason at a terminal phase,
// however the run ended (this pass, the node-agent, a lost node). The write
// that turns it True is the one the outcome metrics are counted on, so each
// run is counted once, also across controller restarts.
func (r *HarnessRunReconciler) markFinished(p *pass) {
	finished := harnessv1.FinishedCondition(&p.run.Status, p.run.Generation, p.now)
	meta.SetStatusCondition(&p.run.Status.Conditions, finished)
	if stalled, ok := harnessv1.RunStalledCondition(&p.run.Status, finished); ok {
		meta.SetStatusCondition(&p.run.Status.Conditions, stalled)
	}
}

// finishedMarked reports whether run carries Finished=True.
func finishedMarked(run *harnessv1.HarnessRun) bool {
	return meta.IsStatusConditionTrue(run.Status.Conditions, harnessv1.ConditionFinished)
}

// finishedCurrent reports whether run carries Finished=True for its current
// generation (kubectl wait ignores a condition observed for an older one).
func finishedCurrent(run *harnessv1.HarnessRun) bool {
	c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionFinished)
	return c != nil && c.Status == "True" && c.ObservedGeneration >= run.Generation
}
