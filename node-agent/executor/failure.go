package executor

import (
	"errors"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Failure is why a step of an attempt could not go on: the reason status
// reports, and the error whose message it shows. Steps return it; the
// attempt ends Failed with class Infrastructure and verdict Error.
type Failure struct {
	// Reason is one of the harnessv1.Reason... constants.
	Reason string
	Err    error
}

func (f *Failure) Error() string { return f.Err.Error() }
func (f *Failure) Unwrap() error { return f.Err }

// fail wraps err as the failure of a step with reason.
func fail(reason string, err error) error { return &Failure{Reason: reason, Err: err} }

// failed is the outcome of an attempt a step ended with err.
func failed(err error) *Outcome {
	reason := harnessv1.ReasonExecutorPanic
	var f *Failure
	if errors.As(err, &f) {
		reason = f.Reason
	}
	if reason == harnessv1.ReasonPolicyViolation {
		// A refusal judges nobody: no verdict, no failure class, as when
		// the controller refuses a run before binding it.
		return &Outcome{Status: harnessv1.HarnessRunStatus{Phase: harnessv1.RunFailed, Reason: reason, Message: err.Error()}}
	}
	return &Outcome{Status: harnessv1.HarnessRunStatus{
		Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError,
		FailureClass: harnessv1.FailureInfrastructure, Reason: reason, Message: err.Error(),
	}}
}

// stoppedBeforeAgent is the outcome of an attempt stopped before its agent
// started: as for a stopped agent (verdict), nobody's failure, no failure
// class, never retried.
func stoppedBeforeAgent(sc *StopCause) *Outcome {
	return &Outcome{Status: harnessv1.HarnessRunStatus{
		Phase: harnessv1.RunFailed, Verdict: harnessv1.VerdictError,
		Reason: sc.Reason, Message: sc.Message + "; before the agent started",
	}}
}
