package executor

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// TestApplySetsFinished: the write that ends an attempt carries Finished
// (the verdict as reason, or the stop reason) and, for a run that did not
// pass, kstatus' Stalled, for the run's generation.
func TestApplySetsFinished(t *testing.T) {
	type cond struct {
		Status     metav1.ConditionStatus
		Reason     string
		Generation int64
	}
	cases := []struct {
		name     string
		out      harnessv1.HarnessRunStatus
		finished cond
		stalled  *cond
	}{
		{"pass", harnessv1.HarnessRunStatus{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictPass, Message: "ok"},
			cond{"True", "Pass", 3}, nil},
		{"fail", harnessv1.HarnessRunStatus{Phase: harnessv1.RunSucceeded, Verdict: harnessv1.VerdictFail, FailureClass: harnessv1.FailureCheck},
			cond{"True", "Fail", 3}, &cond{"True", "Fail", 3}},
		{"infrastructure", harnessv1.HarnessRunStatus{Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError, Reason: harnessv1.ReasonBadFixture},
			cond{"True", "Error", 3}, &cond{"True", "Error", 3}},
		{"cancelled", harnessv1.HarnessRunStatus{Phase: harnessv1.RunFailed, Reason: harnessv1.ReasonCancelled, Message: "spec.cancel"},
			cond{"True", harnessv1.ReasonCancelled, 3}, &cond{"True", harnessv1.ReasonCancelled, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			run := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Generation: 3},
				Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunRunning}}
			(&Outcome{Status: tc.out}).Apply(run, time.Now())
			get := func(typ string) *cond {
				c := meta.FindStatusCondition(run.Status.Conditions, typ)
				if c == nil {
					return nil
				}
				return &cond{c.Status, c.Reason, c.ObservedGeneration}
			}
			if diff := cmp.Diff(&tc.finished, get(harnessv1.ConditionFinished)); diff != "" {
				t.Errorf("Finished (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.stalled, get(harnessv1.ConditionStalled)); diff != "" {
				t.Errorf("Stalled (-want +got):\n%s", diff)
			}
		})
	}
}
