package executor

import (
	"context"
	"fmt"
	"strings"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// readFixture reads the fixture the run names and settles the attempt's
// limits with harnessv1.ResolveLimits: the run's, then the fixture's, then
// the defaults, under the HarnessPolicy ceilings the controller recorded
// when it bound the run. A fixture asking for more than a ceiling allows is
// refused, never cut.
func (a *attempt) readFixture(ctx context.Context) error {
	fix, err := a.e.opts.Sources.Fixture(ctx, a.run, fixture.Limits{})
	if err != nil {
		return fail(harnessv1.ReasonBadFixture, fmt.Errorf("the fixture cannot be used: %w", err))
	}
	a.fix = fix
	a.setLimits(harnessv1.ResolveLimits(a.run.Spec.Limits, fix.Manifest.Limits, a.run.Status.LimitCeilings))
	if v := a.resolved.Violations; len(v) > 0 {
		words := make([]string, len(v))
		for i := range v {
			words[i] = v[i].String()
		}
		return fail(harnessv1.ReasonPolicyViolation, fmt.Errorf("refused by the namespace's HarnessPolicies: %s", strings.Join(words, "; ")))
	}
	if f := a.e.opts.LimitsSettled; f != nil {
		f(ctx, a.run, *a.resolved)
	}
	return nil
}

// setLimits makes r the attempt's limits.
func (a *attempt) setLimits(r harnessv1.ResolvedLimits) {
	a.resolved = &r
	a.limits = r.Limits
}
