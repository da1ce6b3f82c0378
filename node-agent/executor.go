package nodeagent

import (
	"context"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
)

// Executor executes one claimed attempt of a run, from fixture to evidence.
// It writes nothing to the API server: it returns the outcome, which the
// Agent (on a cluster) or `harnessfacts run` (on a laptop) persists. When
// the run must stop, ctx is cancelled with a *StopCause; the executor kills
// the agent's process tree and still returns what it knows.
type Executor interface {
	Execute(ctx context.Context, run *harnessv1.HarnessRun) *Result
}

// Result is the outcome of one attempt.
type Result struct {
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
}

// Evidence is the content of an evidence ConfigMap, bounded to fit one.
type Evidence struct {
	Data       map[string]string
	BinaryData map[string][]byte

	bundle *evidence.Bundle
}

// Warning is something an operator must see as a Warning Event.
type Warning struct {
	Reason  string
	Message string
}
