package executor

import (
	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/trajectory"
)

// sealedTrajectory is trajectory.json as the evidence stores it.
type sealedTrajectory struct {
	data  []byte
	steps int
}

// trajectory builds the run's ATIF trajectory from the CLI's event stream
// (the redacted log), redacts it again with the run's redactor — a text
// JSON-escaped in the log is whole once decoded — and bounds it, before
// anything hashes it. Nil for an adapter without one, or when the log
// held none.
func (a *attempt) trajectory(logBytes []byte, u *harnessv1.UsageStatus) *sealedTrajectory {
	r, ok := a.adapter.(adapters.TrajectoryReader)
	if !ok || logBytes == nil {
		return nil
	}
	in := adapters.TrajectoryInput{Prompt: a.prompt, CLIVersion: a.version(), SessionID: string(a.run.UID)}
	if u != nil {
		in.Model = u.ModelRequested
		if len(u.Models) > 0 {
			in.Model = u.Models[0]
		}
	}
	t := r.Trajectory(logBytes, in)
	if t == nil {
		return nil
	}
	data, steps, err := trajectory.Seal(t, a.redactor.Bytes, trajectory.MaxBytes)
	if err != nil {
		// The run goes on without one: output.log still holds the stream.
		log.Log.Info("no trajectory for the run", "run", a.run.Namespace+"/"+a.run.Name, "error", err.Error())
		return nil
	}
	return &sealedTrajectory{data: data, steps: steps}
}
