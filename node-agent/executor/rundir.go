package executor

import (
	"context"
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
)

// makeRunDir copies the fixture into a fresh run dir and adds the agent's
// folders (the layout is fixture/rundir.go's). The run dir, and the
// credential copies in it, are removed when the attempt ends.
func (a *attempt) makeRunDir(ctx context.Context) error {
	dir, err := a.fix.MaterializeLimited(a.e.opts.RunRoot, a.run.Name, a.run.Status.Attempt, a.limits.Disk.Value())
	if errors.Is(err, fixture.ErrDiskLimitUnavailable) && os.Geteuid() != 0 {
		// `harnessfacts run` as a user who cannot mount: the run goes on
		// without the limit, and says so (the node-agent runs as root).
		a.diskNote = fmt.Sprintf("limits.disk (%s) was not enforced: %v", a.limits.Disk.String(), err)
		dir, err = a.fix.Materialize(a.e.opts.RunRoot, a.run.Name, a.run.Status.Attempt)
	}
	if errors.Is(err, fixture.ErrDiskLimitUnavailable) {
		return fail(harnessv1.ReasonRunDirFailed, fmt.Errorf("the run dir cannot get its size limit (limits.disk %s): %w", a.limits.Disk.String(), err))
	}
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
	ids := a.runIDs()
	if err := dir.GiveSockets(ids.uid, ids.gid); err != nil {
		return fail(harnessv1.ReasonRunDirFailed, err)
	}
	return nil
}
