package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/version"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/trajectory"
)

// evidence seals the attempt's receipt, redacted log and artifacts. The
// receipt records what status says, so the digest vouches for both.
func (a *attempt) evidence(in *ran, st *harnessv1.HarnessRunStatus) (*Evidence, *harnessv1.EvidenceStatus, error) {
	a.step(StepEvidence)
	run := a.run
	specDigest := SpecDigest(run.Spec)
	r := evidence.Receipt{
		Run:            evidence.RunRef{Namespace: run.Namespace, Name: run.Name, UID: string(run.UID), Attempt: run.Status.Attempt},
		SpecDigest:     specDigest,
		FixtureDigest:  a.fix.Digest,
		HarnessVersion: version.String(),
		HarnessImage:   a.e.opts.Image,
		Agent: evidence.Agent{Adapter: run.Spec.Agent.Adapter, CLIVersion: a.version(),
			CLIPath: a.cliPath, CLIDigest: a.cliDigest},
		Node:   run.Status.NodeName,
		Limits: a.limits,
		Timings: evidence.Timings{Started: a.started, Finished: time.Now(),
			AgentMilliseconds: in.agent.Duration.Milliseconds()},
		Exit:   evidence.Exit{TimedOut: in.agent.TimedOut, OOMKilled: in.agent.OOMKilled, OOMCause: in.agent.OOMCause},
		Output: evidence.Output{Truncated: in.out.truncated()},
		MCP:    evidence.MCP{Summary: in.mcp, TokenSeen: in.tokenSeen},
		Checks: in.checks,
	}
	if st.Sandbox != nil {
		r.Sandbox = *st.Sandbox
	}
	r.Reward = st.Reward
	if st.Environment != nil {
		env := *st.Environment
		r.Environment = &env
	}
	if a.fixtureSource != nil {
		fs := *a.fixtureSource
		r.FixtureSource = &fs
	}
	if st.Usage != nil {
		u := *st.Usage
		r.Usage = &u
	}
	switch {
	case a.route != nil:
		r.Provider = &evidence.Provider{URL: a.redactor.String(endpoint(a.route.Upstream)), Gateway: true}
	case run.Spec.Agent.ProviderURL != "":
		r.Provider = &evidence.Provider{URL: a.redactor.String(endpoint(run.Spec.Agent.ProviderURL))}
	}
	if st.Network != nil {
		n := *st.Network
		r.Network = &n
	}
	if st.Agent != nil {
		r.Exit.ExitCode, r.Exit.Signal = st.Agent.ExitCode, st.Agent.Signal
	}
	parts := evidence.Parts{Output: in.out.log(), Artifacts: in.artifacts}
	if t := in.trajectory; t != nil {
		parts.Trajectory, parts.TrajectoryFormat, parts.TrajectorySteps = t.data, trajectory.SchemaVersion, t.steps
	}
	b, err := evidence.SealParts(r, parts, 0)
	if err != nil {
		return nil, nil, err
	}
	status := &harnessv1.EvidenceStatus{Digest: b.Digest, FixtureDigest: a.fix.Digest, SpecDigest: specDigest}
	key := a.e.opts.SigningKey
	if src, ok := a.e.opts.Sources.(SigningKeySource); ok {
		// The operator's key, when one is configured, is asked for only
		// now: the agent's sandbox is over, and it is held in this
		// process's memory only, never written to disk.
		opKey, err := src.SigningKey(context.Background(), run)
		if err != nil {
			return nil, nil, err
		}
		if opKey != nil {
			key = opKey
		}
	}
	if key != nil {
		// The key never leaves this process: the agent's sandbox is over,
		// and the statement holds only what the node-agent measured.
		if err := b.Sign(context.Background(), key); err != nil {
			return nil, nil, err
		}
		status.SignedBy = key.Public().ID
	}
	data, binary := b.ConfigMapData()
	return &Evidence{Data: data, BinaryData: binary, bundle: b}, status, nil
}

// digest is "sha256:<hex>" of data.
func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// SpecDigest is the digest of the run's spec as canonical JSON.
func SpecDigest(spec harnessv1.HarnessRunSpec) string {
	b, _ := json.Marshal(spec) // struct fields marshal in a fixed order
	return digest(b)
}
