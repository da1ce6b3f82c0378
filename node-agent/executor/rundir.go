package executor

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// makeRunDir copies the fixture into a fresh run dir and adds the agent's
// folders (the layout is fixture/rundir.go's). The run dir, and the
// credential copies in it, are removed when the attempt ends.
func (a *attempt) makeRunDir(ctx context.Context) error {
	dir, err := a.fix.Materialize(a.e.opts.RunRoot, a.run.Name, a.run.Status.Attempt)
	if err != nil {
		return fail(harnessv1.ReasonBadFixture, fmt.Errorf("the fixture cannot be copied into a run dir: %w", err))
	}
	a.dir = dir
	a.deferCleanup(func() {
		if err := dir.Remove(); err != nil {
			log.FromContext(ctx).Error(err, "removing the run dir failed; the next start removes it", "dir", dir.Path)
		}
	})
	if err := dir.MakeAgentDirs(); err != nil {
		return fail(harnessv1.ReasonRunDirFailed, err)
	}
	ids := a.e.runIDs()
	if err := dir.GiveSockets(ids.uid, ids.gid); err != nil {
		return fail(harnessv1.ReasonRunDirFailed, err)
	}
	return nil
}
