package executor

import (
	"io"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// Observer hears of an attempt as it goes, for the node-agent's metrics and
// the progress `harnessfacts run` prints. Its methods are called on the
// attempt's goroutine and must return quickly.
type Observer interface {
	// Step is called as each step of the attempt begins (one of the
	// Step* names).
	Step(run *harnessv1.HarnessRun, step string)
	// AgentStarted is called when the agent's command has started in its
	// sandbox (mode), latency after the executor began the attempt (right
	// after the claim): fixture, run dir, credentials, MCP, egress and the
	// sandbox's own start.
	AgentStarted(run *harnessv1.HarnessRun, mode sandbox.Mode, latency time.Duration)
}

// The steps an Observer hears of, in order.
const (
	StepFixture     = "fixture"
	StepRunDir      = "run dir"
	StepCredentials = "credentials"
	StepEnvironment = "environment"
	StepMCP         = "MCP server"
	StepEgress      = "egress"
	StepAgent       = "agent"
	StepChecks      = "checks"
	StepArtifacts   = "artifacts"
	StepEvidence    = "evidence"
)

// LiveOutput gives each attempt a place for its agent's redacted output as
// it is produced (package livelog's Hub). The executor writes only bytes
// redacted by the run's redactor into it, and closes it when the attempt
// ends.
type LiveOutput interface {
	Open(run *harnessv1.HarnessRun) io.WriteCloser
}

// Observers is an Observer that tells each of its members.
type Observers []Observer

// Step implements Observer.
func (os Observers) Step(run *harnessv1.HarnessRun, step string) {
	for _, o := range os {
		o.Step(run, step)
	}
}

// AgentStarted implements Observer.
func (os Observers) AgentStarted(run *harnessv1.HarnessRun, mode sandbox.Mode, latency time.Duration) {
	for _, o := range os {
		o.AgentStarted(run, mode, latency)
	}
}

func (a *attempt) step(name string) {
	if o := a.e.opts.Observer; o != nil {
		o.Step(a.run, name)
	}
}
