package executor

import (
	"context"
	"fmt"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// readFixture reads the fixture the run names and settles the attempt's
// limits: the run's, then the fixture's, then the defaults.
func (a *attempt) readFixture(ctx context.Context) error {
	fix, err := a.e.opts.Sources.Fixture(ctx, a.run, fixture.Limits{})
	if err != nil {
		return fail(harnessv1.ReasonBadFixture, fmt.Errorf("the fixture cannot be used: %w", err))
	}
	a.fix = fix
	a.limits = effectiveLimits(a.run.Spec.Limits, fix.Manifest.Limits)
	return nil
}
