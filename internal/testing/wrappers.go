// Package testing holds builders of API objects for tests:
// MakeHarnessRun(name, namespace).Adapter(...).Obj().
package testing

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// RunWrapper builds a HarnessRun.
type RunWrapper struct{ harnessv1.HarnessRun }

// MakeHarnessRun returns a valid run of the codex adapter with a small inline
// fixture.
func MakeHarnessRun(name, namespace string) *RunWrapper {
	return &RunWrapper{harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterCodex},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: Write hello.txt containing hello.\n",
			}}},
		},
	}}
}

// Obj returns the run.
func (w *RunWrapper) Obj() *harnessv1.HarnessRun { return w.DeepCopy() }

// Adapter sets spec.agent.adapter (with a command for exec).
func (w *RunWrapper) Adapter(a harnessv1.Adapter) *RunWrapper {
	w.Spec.Agent.Adapter = a
	w.Spec.Agent.Command = nil
	if a == harnessv1.AdapterExec {
		w.Spec.Agent.Command = []string{"sh", "-c", "echo hello > hello.txt"}
	}
	return w
}

// Version pins the adapter's CLI version.
func (w *RunWrapper) Version(v string) *RunWrapper {
	w.Spec.Agent.Version = v
	return w
}

// NodeSelector sets spec.nodeSelector.
func (w *RunWrapper) NodeSelector(sel map[string]string) *RunWrapper {
	w.Spec.NodeSelector = sel
	return w
}

// Retries sets spec.retries.
func (w *RunWrapper) Retries(n int32) *RunWrapper {
	w.Spec.Retries = n
	return w
}

// TTL sets spec.ttlSecondsAfterFinished.
func (w *RunWrapper) TTL(seconds int32) *RunWrapper {
	w.Spec.TTLSecondsAfterFinished = &seconds
	return w
}

// EpisodeSeconds sets spec.limits.episodeSeconds (and probeSeconds, which
// may not be longer).
func (w *RunWrapper) EpisodeSeconds(s int32) *RunWrapper {
	w.Spec.Limits.EpisodeSeconds = s
	w.Spec.Limits.ProbeSeconds = s
	return w
}

// Label adds a label.
func (w *RunWrapper) Label(k, v string) *RunWrapper {
	if w.Labels == nil {
		w.Labels = map[string]string{}
	}
	w.Labels[k] = v
	return w
}
