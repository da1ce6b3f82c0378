package executor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// blockingSources reads the fixture (or, with fixtureOK, a Secret) as the
// controller's run source does from the API server: the read waits, and
// fails once the attempt's context is done.
type blockingSources struct {
	fixtureOK bool
	reading   chan struct{}
}

func (s blockingSources) Fixture(ctx context.Context, run *harnessv1.HarnessRun, lim fixture.Limits) (*fixture.Fixture, error) {
	if s.fixtureOK {
		return inlineSources{}.Fixture(ctx, run, lim)
	}
	close(s.reading)
	<-ctx.Done()
	return nil, fmt.Errorf("reading the fixture's ConfigMap: %w", ctx.Err())
}

func (s blockingSources) SecretKey(ctx context.Context, _ *harnessv1.HarnessRun, ref harnessv1.SecretKeySelector) ([]byte, error) {
	close(s.reading)
	<-ctx.Done()
	return nil, fmt.Errorf("reading Secret %s: %w", ref.Name, ctx.Err())
}

// TestStopBeforeTheAgentIsTheRunsReason: a run cancelled (or deleted) while
// its fixture or a credential was being read ends with reason Cancelled
// (Deleted), no failure class, and its agent never starts; not with the
// reason of the read the stop interrupted (BadFixture,
// CredentialsUnavailable), which blamed the fixture for a user's cancel.
// Found by the kubectl plugin test, whose cancel sometimes reached a run
// while it read its fixture.
func TestStopBeforeTheAgentIsTheRunsReason(t *testing.T) {
	root := rootRunRoot(t, "hf-stop-")
	for _, c := range []struct {
		name      string
		fixtureOK bool
		stop      *StopCause
	}{
		{"fixture-cancelled", false, &StopCause{Reason: harnessv1.ReasonCancelled, Message: "spec.cancel stopped the run"}},
		{"secret-cancelled", true, &StopCause{Reason: harnessv1.ReasonCancelled, Message: "spec.cancel stopped the run"}},
		{"fixture-deleted", false, &StopCause{Reason: harnessv1.ReasonDeleted, Message: "the run was deleted while it ran"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := blockingSources{fixtureOK: c.fixtureOK, reading: make(chan struct{})}
			obs := &startedAgents{started: map[string]int{}}
			e, err := New(Options{Sources: src, RunRoot: root, InitBinary: "/bin/true", Observer: obs})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = e.Close() }()
			run := &harnessv1.HarnessRun{
				ObjectMeta: metav1.ObjectMeta{Name: c.name, Namespace: "tenant", UID: types.UID("uid-" + c.name)},
				Spec: harnessv1.HarnessRunSpec{
					Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"},
						Credentials: []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: "creds", Key: "token"}, Env: "TOKEN"}}},
					Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{"fixture.yaml": "prompt: nothing\n"}}},
					Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressNone},
				},
				Status: harnessv1.HarnessRunStatus{Attempt: 1},
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			go func() {
				<-src.reading
				cancel(c.stop)
			}()
			st := e.Execute(ctx, run).Status
			if st.Phase != harnessv1.RunFailed || st.Reason != c.stop.Reason || st.FailureClass != "" {
				t.Errorf("%s %s (class %q): %s; want Failed %s with no failure class", st.Phase, st.Reason, st.FailureClass, st.Message, c.stop.Reason)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if obs.started[c.name] != 0 {
				t.Errorf("the agent started %d times", obs.started[c.name])
			}
		})
	}
}

// stopAtChecks cancels the attempt when its checks begin.
type stopAtChecks struct {
	startedAgents
	cancel func(error)
}

func (s *stopAtChecks) Step(run *harnessv1.HarnessRun, step string) {
	s.startedAgents.Step(run, step)
	if step == StepChecks {
		s.cancel(&StopCause{Reason: harnessv1.ReasonCancelled, Message: "spec.cancel stopped the run"})
	}
}

// TestStopDuringTheChecksIsTheRunsReason: a run cancelled once its agent
// ended, while a check ran, ends Cancelled with no failure class; not with
// verdict Fail for the check the cancel cut short, which blamed the agent
// for a user's cancel. Real bwrap.
func TestStopDuringTheChecksIsTheRunsReason(t *testing.T) {
	root := rootRunRoot(t, "hf-stop-")
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	obs := &stopAtChecks{startedAgents: startedAgents{started: map[string]int{}}, cancel: cancel}
	e, err := New(Options{Sources: inlineSources{}, RunRoot: root, InitBinary: "/bin/true", Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close() }()
	start := time.Now()
	st := e.Execute(ctx, &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: "checks-cancelled", Namespace: "tenant", UID: types.UID("uid-checks-cancelled")},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"true"}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: nothing\nchecks:\n- name: slow\n  command: [sleep, \"30\"]\n"}}},
			Network: harnessv1.NetworkSpec{Egress: harnessv1.EgressNone},
		},
		Status: harnessv1.HarnessRunStatus{Attempt: 1},
	}).Status
	if st.Phase != harnessv1.RunFailed || st.Reason != harnessv1.ReasonCancelled || st.FailureClass != "" || st.Verdict != harnessv1.VerdictError ||
		!strings.Contains(st.Message, "its checks were stopped") {
		t.Errorf("%s %s %s (class %q): %s; want Failed Error Cancelled, no failure class, saying the checks were stopped", st.Phase, st.Verdict, st.Reason, st.FailureClass, st.Message)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("the stopped check ran on for %s", d)
	}
}
