package adapters

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Oracle runs the fixture's own solution (fixture.yaml solution:, Harbor's
// solution/solve.sh) in place of an agent, to validate the fixture: in the
// same sandbox, with the same limits, network and checks as any agent's
// run, its checks should pass. The node-agent writes the solution into the
// run dir only for an oracle's run (Input.Solution), never for an agent.
// The script runs in the workspace and learns the prompt as the exec
// adapter's command does (HARNESSFACTS_PROMPT), with solution.env set.
type Oracle struct{}

// Name is oracle.
func (Oracle) Name() harnessv1.Adapter { return harnessv1.AdapterOracle }

// Version is the harness's own: the script is the fixture's.
func (Oracle) Version(context.Context) (string, error) { return "builtin", nil }

// Prepare runs the solution's command.
func (Oracle) Prepare(in Input) (*Invocation, error) {
	if in.Solution == "" {
		return nil, errors.New("the oracle adapter needs a fixture with a solution (fixture.yaml solution:)")
	}
	for _, c := range in.Credentials {
		if c.File != "" {
			return nil, fmt.Errorf("the oracle adapter cannot place credential file %s; deliver it as env", c.File)
		}
	}
	inv := &Invocation{
		Argv: append([]string{in.Solution}, in.Agent.ExtraArgs...),
		Env: []string{
			"HARNESSFACTS_PROMPT=" + in.Prompt,
			fmt.Sprintf("HARNESSFACTS_MAX_DECISIONS=%d", in.MaxDecisions),
		},
	}
	for _, k := range slices.Sorted(maps.Keys(in.SolutionEnv)) {
		inv.Env = append(inv.Env, k+"="+in.SolutionEnv[k])
	}
	inv.Env = append(inv.Env, credentialEnv(in.Credentials)...)
	return inv, nil
}
