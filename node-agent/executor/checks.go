package executor

import (
	"context"
	"fmt"
	"strings"
	"time"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// checkOutputBytes bounds what a check's output contributes to status.
const checkOutputBytes = 4 << 10

// runChecks runs each fixture check in the sandbox after the agent, in the
// workspace, without network, within probeSeconds. A check cannot be
// skipped by the agent: the manifest was read before the agent ran.
func (a *attempt) runChecks(ctx context.Context) []harnessv1.CheckResult {
	var results []harnessv1.CheckResult
	for _, c := range a.fix.Manifest.Checks {
		spec := a.e.baseSpec(a.dir, harnessv1.EgressNone)
		spec.Network = sandbox.NetworkNone
		spec.Argv = c.Argv()
		spec.Limits = sandbox.Limits{
			MemoryBytes:  a.limits.Memory.Value(),
			MaxProcesses: int64(a.limits.MaxProcesses),
			Timeout:      time.Duration(a.limits.ProbeSeconds) * time.Second,
		}
		out := newOutput(a.redactor, "", checkOutputBytes)
		spec.Stdout, spec.Stderr = out.writer(), out.writer()
		res, err := a.runner.Run(ctx, spec)
		out.close()
		r := harnessv1.CheckResult{Name: c.Name, DurationMilliseconds: res.Duration.Milliseconds()}
		switch {
		case err != nil && !res.TimedOut:
			r.Message = "the check could not run: " + err.Error()
		case res.TimedOut:
			r.Message = fmt.Sprintf("the check did not finish within probeSeconds (%ds)", a.limits.ProbeSeconds)
		default:
			code := int32(res.ExitCode)
			r.ExitCode = &code
			r.Passed = res.ExitCode == 0 && res.Signal == 0
			if !r.Passed {
				r.Message = fmt.Sprintf("exited with code %d", res.ExitCode)
			}
		}
		if tail := strings.TrimSpace(string(out.tail(512))); tail != "" {
			if r.Message != "" {
				r.Message += ": "
			}
			r.Message += tail
		}
		r.Message = truncate(r.Message, 1024)
		results = append(results, r)
		if ctx.Err() != nil {
			break
		}
	}
	return results
}
