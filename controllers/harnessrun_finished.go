package controllers

import (
	"k8s.io/apimachinery/pkg/api/meta"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// markFinished sets the run's Finished condition from its phase: False
// before the end, True with the verdict as reason at a terminal phase. The
// node-agent sets it in the write that ends an attempt (the same
// harnessv1.MarkFinished); this adds it when this pass ended the run, and to
// a terminal run that lacks it (one ended by an older node-agent).
func (r *HarnessRunReconciler) markFinished(p *pass) {
	harnessv1.MarkFinished(&p.run.Status, p.run.Generation, p.now)
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
