package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

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
	a.deferCleanup(func() { a.e.graves.bury(ctx, dir) })
	if err := dir.MakeAgentDirs(); err != nil {
		return fail(harnessv1.ReasonRunDirFailed, err)
	}
	ids := a.runIDs()
	if err := dir.GiveSockets(ids.uid, ids.gid); err != nil {
		return fail(harnessv1.ReasonRunDirFailed, err)
	}
	return nil
}

// runDirGrace is how long the emptied mount points of a finished run's dir
// stay before they are removed (fixture.RunDir.Empty says why): far longer
// than a sandbox's setup takes, even on a loaded node.
const runDirGrace = 5 * time.Second

// graveyard removes finished runs' dirs: at once, or, when a mount was
// taken off one, after runDirGrace (until Close).
type graveyard struct {
	mu      sync.Mutex
	closed  bool
	waiting map[*fixture.RunDir]*time.Timer
	timers  sync.WaitGroup
	// grace is runDirGrace, or shorter in tests.
	grace time.Duration
}

// bury empties dir at once and removes it when that is safe.
func (g *graveyard) bury(ctx context.Context, dir *fixture.RunDir) {
	logger := log.FromContext(ctx)
	remove := func() {
		if err := dir.Remove(); err != nil {
			logger.Error(err, "removing the run dir failed; the next start removes it", "dir", dir.Path)
		}
	}
	mounted, err := dir.Empty()
	if err != nil {
		logger.Error(err, "emptying the run dir failed", "dir", dir.Path)
	}
	g.mu.Lock()
	if !mounted || g.closed {
		g.mu.Unlock()
		remove()
		return
	}
	if g.waiting == nil {
		g.waiting = map[*fixture.RunDir]*time.Timer{}
	}
	grace := g.grace
	if grace == 0 {
		grace = runDirGrace
	}
	g.timers.Add(1)
	g.waiting[dir] = time.AfterFunc(grace, func() {
		defer g.timers.Done()
		g.mu.Lock()
		_, mine := g.waiting[dir] // close may have taken it
		delete(g.waiting, dir)
		g.mu.Unlock()
		if mine {
			remove()
		}
	})
	g.mu.Unlock()
}

// close removes the dirs still waiting at once, and any later one as it
// comes: no sandbox of this executor starts any more. It may be called
// more than once.
func (g *graveyard) close() {
	g.mu.Lock()
	g.closed = true
	waiting := g.waiting
	g.waiting = nil
	g.mu.Unlock()
	for dir, t := range waiting {
		if t.Stop() {
			g.timers.Done()
		}
		if err := dir.Remove(); err != nil {
			log.Log.Error(err, "removing the run dir failed; the next start removes it", "dir", dir.Path)
		}
	}
	g.timers.Wait()
}
