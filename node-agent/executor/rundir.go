package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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
	dir, err := a.fix.MaterializeLimited(a.e.opts.RunRoot, a.limits.Disk.Value())
	if errors.Is(err, fixture.ErrDiskLimitUnavailable) && os.Geteuid() != 0 {
		// `harnessfacts run` as a user who cannot mount: the run goes on
		// without the limit, and says so (the node-agent runs as root).
		a.diskNote = fmt.Sprintf("limits.disk (%s) was not enforced: %v", a.limits.Disk.String(), err)
		dir, err = a.fix.Materialize(a.e.opts.RunRoot)
	}
	if errors.Is(err, fixture.ErrDiskLimitUnavailable) {
		return fail(harnessv1.ReasonRunDirFailed, fmt.Errorf("the run dir cannot get its size limit (limits.disk %s): %w", a.limits.Disk.String(), err))
	}
	if errors.Is(err, fixture.ErrRunRoot) {
		// The node's disk full or read-only: every run here fails alike,
		// and none of them is the fixture's fault.
		return fail(harnessv1.ReasonRunDirFailed, fmt.Errorf("the node cannot make a run dir: %w", err))
	}
	if err != nil {
		return fail(harnessv1.ReasonBadFixture, fmt.Errorf("the fixture cannot be copied into a run dir: %w", err))
	}
	a.dir = dir
	a.deferCleanup(func() { a.e.graves.bury(ctx, dir) })
	if err := dir.MakeAgentDirs(); err != nil {
		return fail(harnessv1.ReasonRunDirFailed, err)
	}
	a.e.overlayOnce.Do(func() {
		// Once, in a run dir like every other and before its agent ran:
		// whether the checks get views of their own is the node's
		// property, never decided by what an agent left.
		if a.e.overlayErr = dir.ProbeOverlay(); a.e.overlayErr != nil {
			log.FromContext(ctx).Error(a.e.overlayErr, "no overlay can be mounted over a run's workspace here: the checks of a run share its workspace")
		}
	})
	// The fixture's own repositories, as the checks' are (judgeWorkspace):
	// git runs what a repository's config names (core.fsmonitor, a pager,
	// a filter) whenever anything looks at the workspace, and an agent CLI
	// does at its start, before and without any decision of the model
	// (Claude Code's git status). The fixture author's commands must not
	// run with the agent's home, its credentials and the MCP token.
	notes, err := sanitizeGitConfig(dir.Workspace())
	if err != nil {
		return fail(harnessv1.ReasonBadFixture, fmt.Errorf("the fixture's git config could not be made safe for the agent: %w", err))
	}
	if len(notes) > 0 {
		a.fixtureNote = "the fixture's git config was made safe before the agent ran: " + strings.Join(notes, "; ")
	}
	ids := a.runIDs()
	if err := dir.GiveSockets(ids.uid, ids.gid); err != nil {
		return fail(harnessv1.ReasonRunDirFailed, err)
	}
	return nil
}

// setupBound is how long a sandbox's setup may take, generously: the
// emptied mount points of a finished run's dir wait for the sandboxes that
// were starting when their mounts were taken off, until each has ended or
// has been running this long (fixture.RunDir.Empty says why). A sandbox
// whose bwrap is still in its setup past it is started again by the
// sandbox itself (sandbox.Result.SetupRetries).
const setupBound = 2 * time.Second

// graveyard removes finished runs' dirs: at once when no sandbox of this
// executor is starting, else once those that were starting are past their
// setup (or at Close).
type graveyard struct {
	mu      sync.Mutex
	closed  bool
	waiting map[*fixture.RunDir]*time.Timer
	timers  sync.WaitGroup
	// sandboxes are this executor's sandboxes whose Run has not returned,
	// with the time it began.
	sandboxes map[uint64]time.Time
	next      uint64
	// bound is setupBound, or shorter in tests.
	bound time.Duration
}

// pollEvery is how often a waiting run dir looks at the sandboxes again.
const pollEvery = 20 * time.Millisecond

// sandbox says a sandbox's Run begins; done says it returned.
func (g *graveyard) sandbox() (done func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sandboxes == nil {
		g.sandboxes = map[uint64]time.Time{}
	}
	g.next++
	id := g.next
	g.sandboxes[id] = time.Now()
	return func() {
		g.mu.Lock()
		delete(g.sandboxes, id)
		g.mu.Unlock()
	}
}

// startingLocked returns the sandboxes that may still be in their setup.
func (g *graveyard) startingLocked() map[uint64]time.Time {
	bound := g.bound
	if bound == 0 {
		bound = setupBound
	}
	var starting map[uint64]time.Time
	for id, began := range g.sandboxes {
		if time.Since(began) < bound {
			if starting == nil {
				starting = map[uint64]time.Time{}
			}
			starting[id] = began
		}
	}
	return starting
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
	starting := g.startingLocked()
	if !mounted || g.closed || len(starting) == 0 {
		g.mu.Unlock()
		remove()
		return
	}
	if g.waiting == nil {
		g.waiting = map[*fixture.RunDir]*time.Timer{}
	}
	var check func()
	check = func() {
		g.mu.Lock()
		if _, mine := g.waiting[dir]; !mine { // close took it
			g.mu.Unlock()
			g.timers.Done()
			return
		}
		now := g.startingLocked()
		for id := range starting {
			if _, still := now[id]; still {
				g.waiting[dir] = time.AfterFunc(pollEvery, check)
				g.mu.Unlock()
				return
			}
		}
		delete(g.waiting, dir)
		g.mu.Unlock()
		remove()
		g.timers.Done()
	}
	g.timers.Add(1)
	g.waiting[dir] = time.AfterFunc(pollEvery, check)
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
