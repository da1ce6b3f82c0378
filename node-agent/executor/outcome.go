package executor

import (
	"context"
	"errors"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

// Outcome is what one attempt found.
type Outcome struct {
	// Status holds the terminal phase, verdict, failure class, reason and
	// message, conditions, and the sandbox, agent, MCP, network, checks,
	// artifacts and evidence reports. Attempt, node and times are the
	// caller's.
	Status harnessv1.HarnessRunStatus
	// Evidence is the evidence to store; nil when the attempt ended before
	// there was any (for example a fixture that could not be read).
	Evidence *Evidence
	// Warnings become Warning Events (for example an unsandboxed fallback).
	Warnings []Warning

	// Cleaned, when not nil, is closed when the attempt's cleanup is done
	// (Options.CleanBehind); nil when it was done before Execute returned.
	Cleaned <-chan struct{}
}

// WaitCleaned returns once the attempt's cleanup is done: its run dir and
// the credential copies in it removed, its servers stopped, its ids given
// back. At once unless the Executor cleans behind (Options.CleanBehind).
func (o *Outcome) WaitCleaned() {
	if o != nil && o.Cleaned != nil {
		<-o.Cleaned
	}
}

// Evidence is the content of an evidence ConfigMap, bounded to fit one.
type Evidence struct {
	Data       map[string]string
	BinaryData map[string][]byte

	bundle *evidence.Bundle
}

// WriteDir writes the evidence as a folder, for `harnessfacts run`.
func (ev *Evidence) WriteDir(dir string) error { return ev.bundle.WriteDir(dir) }

// Warning is something an operator must see as a Warning Event.
type Warning struct {
	Reason  string
	Message string
}

// StopCause is the cause of an attempt's context when the run must stop.
type StopCause struct {
	// Reason is harnessv1.ReasonCancelled or harnessv1.ReasonDeleted.
	Reason string
	// Message says why in plain words.
	Message string
}

func (s *StopCause) Error() string { return s.Message }

// stopCauseOf returns the StopCause of a cancelled attempt.
func stopCauseOf(ctx context.Context) *StopCause {
	var sc *StopCause
	if errors.As(context.Cause(ctx), &sc) {
		return sc
	}
	if ctx.Err() != nil {
		return &StopCause{Reason: harnessv1.ReasonStopped, Message: "the node-agent stopped the run: " + ctx.Err().Error()}
	}
	return nil
}

// Apply merges the outcome into the run's status, as of now: the terminal
// phase, its conditions, Ready, and Finished (harnessv1.MarkFinished).
func (o *Outcome) Apply(run *harnessv1.HarnessRun, now time.Time) {
	t := metav1.NewTime(now)
	st := &run.Status
	out := o.Status
	st.Phase, st.Verdict, st.FailureClass = out.Phase, out.Verdict, out.FailureClass
	st.Reason, st.Message = out.Reason, out.Message
	st.CompletionTime = &t
	st.ObservedGeneration = run.Generation
	st.Sandbox, st.Agent, st.MCP, st.Network = out.Sandbox, out.Agent, out.MCP, out.Network
	st.Environment, st.Reward, st.FixtureSource = out.Environment, out.Reward, out.FixtureSource
	st.Checks, st.Artifacts, st.Evidence = out.Checks, out.Artifacts, out.Evidence
	st.Limits, st.LimitSources = out.Limits, out.LimitSources
	st.Usage = out.Usage
	st.LiveOutput = nil // the live stream ended with the attempt
	for _, c := range out.Conditions {
		c.ObservedGeneration = run.Generation
		if c.LastTransitionTime.IsZero() {
			c.LastTransitionTime = t
		}
		meta.SetStatusCondition(&st.Conditions, c)
	}
	ready := metav1.Condition{Type: harnessv1.ConditionReady, Status: metav1.ConditionFalse, Reason: out.Reason,
		Message: truncate(out.Message, 32768), ObservedGeneration: run.Generation, LastTransitionTime: t}
	if out.Verdict == harnessv1.VerdictPass && out.Phase == harnessv1.RunSucceeded {
		ready.Status = metav1.ConditionTrue
	}
	switch ready.Reason {
	case "":
		ready.Reason = harnessv1.ReasonCompleted
	case harnessv1.ReasonCancelled, harnessv1.ReasonDeleted:
		// The cancel protocol: StopRequested keeps its reason, Ready says
		// the node-agent stopped the run.
		ready.Reason = harnessv1.ReasonStopped
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	// In the write that ends the attempt, so that a watcher of Finished
	// (kubectl wait) needs no further pass of the controller.
	harnessv1.MarkFinished(st, run.Generation, t)
}

// setCondition sets a condition in a status being built.
func setCondition(st *harnessv1.HarnessRunStatus, typ string, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: message})
}

// truncate keeps at most n bytes of s, cut at a character boundary: the API
// server would turn half a UTF-8 character into garbage.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
