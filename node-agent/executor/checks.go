package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"sigs.k8s.io/controller-runtime/pkg/log"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// checkOutputBytes bounds what a check's output contributes to status.
const checkOutputBytes = 4 << 10

// runChecks runs each fixture check after the agent's process tree is gone,
// in the workspace, without network, within probeSeconds. The agent can
// neither skip a check (the manifest was read before it ran) nor forge one:
// fixture.yaml and the verifier part are put in place only now, and each
// check runs in a fresh sandbox (checkSpec) that holds nothing the agent
// wrote but the workspace under test, seen through an overlay of the
// check's own (fixture.RunDir.IsolateWorkspace): what one check (or the
// agent's code it ran) writes, the next does not see.
func (a *attempt) runChecks(ctx context.Context) []harnessv1.CheckResult {
	checks := a.fix.Manifest.Checks
	if len(checks) == 0 {
		return nil
	}
	var results []harnessv1.CheckResult
	tests, err := a.fix.MaterializeChecks(a.dir)
	if err != nil {
		// The verifier part shares the run dir's limits.disk with the
		// workspace: an agent that left less room than it needs made
		// every check "could not run", the fixture's fault to read.
		a.noRoomForChecks = noRoom(err)
		for _, c := range checks {
			results = append(results, harnessv1.CheckResult{Name: c.Name,
				Message: truncate("the check could not run: the fixture's verifier part could not be put in place: "+err.Error(), 1024)})
		}
		return results
	}
	// The workspace is made safe for the checks (its git config, its
	// links) once, before the first check: each check then sees it
	// through an overlay of its own and cannot change it for the next.
	// A check that ran over the workspace itself (no overlay) may have run
	// the agent's code there: then it is judged again before the next. A
	// judgement that refused it stands for every check after it, as long
	// as nothing changed the workspace: the scan of an agent's links is
	// the node-agent's work, and an agent with a million links must not
	// buy it once per check.
	next := a.firstCheck
	var (
		judged   bool
		refusal  string
		gitNotes []string
		shared   error // a check's overlay that could not be taken off
		// saidShared: the log said the checks share the workspace.
		saidShared bool
	)
	for i, c := range checks {
		spec, err := a.checkSpec(i, tests)
		if err != nil {
			a.noRoomForChecks = a.noRoomForChecks || noRoom(err)
			results = append(results, harnessv1.CheckResult{Name: c.Name, Message: truncate("the check could not run: "+err.Error(), 1024)})
			continue
		}
		if !judged {
			judged = true
			gitNotes, refusal = a.judgeWorkspace(ctx, c.Name)
		}
		if refusal != "" {
			results = append(results, harnessv1.CheckResult{Name: c.Name, Message: truncate("the check could not run: "+refusal, 1024)})
			continue
		}
		if shared != nil {
			results = append(results, harnessv1.CheckResult{Name: c.Name,
				Message: truncate("the check could not run: an earlier check's view of the workspace could not be taken off: "+shared.Error(), 1024)})
			continue
		}
		release, isolateErr := a.dir.IsolateWorkspace(a.dir.Join(fmt.Sprintf("check-%d", i)))
		if isolateErr != nil && (a.e.overlayErr == nil || !errors.Is(isolateErr, fixture.ErrNoOverlay)) {
			// This check's view could not be made, though overlays can be
			// mounted here (the probe of this node's first run dir, made
			// before any agent ran, mounted one): what the agent left
			// decides that (it left the run dir a few inodes short, so
			// that only this step failed), and a check over the workspace
			// itself would run the agent's code where the checks after it
			// look. It does not run.
			a.noRoomForChecks = a.noRoomForChecks || noRoom(isolateErr)
			results = append(results, harnessv1.CheckResult{Name: c.Name,
				Message: truncate("the check could not run: its own view of the workspace could not be made: "+isolateErr.Error(), 1024)})
			a.removeCheckDir(ctx, i)
			continue
		}
		if isolateErr != nil && len(checks) > 1 && !saidShared {
			saidShared = true // each check's output says it too
			log.FromContext(ctx).Error(isolateErr, "the checks run over the workspace itself, not a view of their own: what one writes, the checks after it see", "check", c.Name)
		}
		spec.Argv = c.Argv()
		spec.Limits = a.checkLimits()
		// This check's cgroup and network namespace were made while the
		// sandbox before it ran (the agent's, for the first); the next
		// check's are made while this one runs.
		spec.Prepared = next.get()
		if i+1 < len(checks) {
			next = a.prepareCheck()
		} else {
			next = nil
		}
		rewardDir := a.dir.Join(fmt.Sprintf("check-%d", i), "verifier")
		out := newOutput(a.redactor, "", checkOutputBytes)
		out.pace = a.checksPace
		spec.Stdout, spec.Stderr = out.writer(), out.writer()
		if len(gitNotes) > 0 {
			// Shown with the check's own output: the agent left git
			// settings that a check would have run.
			_, _ = fmt.Fprintf(spec.Stderr, "harnessfacts: the workspace's git config, for the checks: %s\n", strings.Join(gitNotes, "; "))
		}
		if isolateErr != nil && len(checks) > 1 {
			_, _ = fmt.Fprintf(spec.Stderr, "harnessfacts: this check runs over the workspace itself, not a view of its own (%v): what it writes, the checks after it see\n", isolateErr)
		}
		done := a.e.graves.sandbox()
		res, err := a.runner.Run(ctx, spec)
		done()
		_ = spec.Prepared.Close() // what the run did not take
		out.close()
		if release == nil {
			judged = false // it ran over the workspace itself
		} else {
			if err := release(); err != nil {
				// Its writes would stay in the workspace under the
				// checks after it: they do not run.
				log.FromContext(ctx).Error(err, "a check's view of the workspace could not be taken off", "check", c.Name)
				shared = err
			}
		}
		noteSetupRetries(ctx, "check "+c.Name, res)
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
		if isolateErr != nil && len(checks) > 1 {
			// Said in the result itself, before the output's tail, which
			// the agent's code writes and can push this out of.
			r.Message = strings.TrimSuffix("ran over the workspace itself, not a view of its own (no overlay can be mounted here): the checks after it see what it wrote; "+r.Message, "; ")
		}
		// Shown by kubectl describe and kept in the receipt: valid UTF-8
		// from a character's start, control sequences inert, as the
		// agent's outputTail.
		if tail := strings.TrimSpace(termsafe.String(validUTF8(fromRuneStart(out.tail(512))))); tail != "" {
			if r.Message != "" {
				r.Message += ": "
			}
			r.Message += tail
		}
		r.Message = truncate(r.Message, 1024)
		if err == nil || res.TimedOut {
			r.Reward, r.RewardError = readReward(rewardDir)
			r.RewardError = truncate(r.RewardError, 256)
		}
		if shared == nil {
			a.removeCheckDir(ctx, i)
		}
		results = append(results, r)
		if ctx.Err() != nil {
			break
		}
	}
	// Every message may name what the agent wrote (a link's name and
	// target, a gitdir's path, a folder the scan could not enter):
	// redacted and made inert like the check's own output.
	inertCheckMessages(a.redactor, results)
	return results
}

// checkLimits are the limits each check runs with.
func (a *attempt) checkLimits() sandbox.Limits {
	return sandbox.Limits{
		MemoryBytes:  a.limits.Memory.Value(),
		MaxProcesses: int64(a.limits.MaxProcesses),
		Timeout:      time.Duration(a.limits.ProbeSeconds) * time.Second,
	}
}

// preparedCheck is a check's cgroup and network namespace, being made
// ahead of its sandbox (sandbox.Preparer).
type preparedCheck struct {
	done chan struct{}
	p    *sandbox.Prepared
}

// prepareCheck starts making the next check's cgroup and network namespace
// ahead of its sandbox, while the sandbox before it runs: on cgroup v1
// they were about a millisecond of each check's start. nil where the
// runner cannot. What no check takes is removed with the attempt.
func (a *attempt) prepareCheck() *preparedCheck {
	pr, ok := a.runner.(sandbox.Preparer)
	if !ok {
		return nil
	}
	spec := sandbox.Spec{Network: sandbox.NetworkNone, Limits: a.checkLimits()}
	pc := &preparedCheck{done: make(chan struct{})}
	go func() {
		defer close(pc.done)
		// A failure here is the check's own start's to meet and say.
		pc.p, _ = pr.Prepare(spec)
	}()
	a.deferCleanup(func() {
		<-pc.done
		_ = pc.p.Close()
	})
	return pc
}

// get waits for the parts being made; nil for none.
func (pc *preparedCheck) get() *sandbox.Prepared {
	if pc == nil {
		return nil
	}
	<-pc.done
	return pc.p
}

// noRoom is true of an error the run dir's limits.disk explains.
func noRoom(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// removeCheckDir removes check i's folders (its home, TMPDIR and reward
// folder) once it ended and its reward was read: they share the run dir's
// limits.disk with the workspace, and what one check's code left there
// (the agent's code, in a build or a test run) must not leave the next
// check too little room to be given its own view of the workspace. Its
// processes are gone: its sandbox's cgroup ended with it.
func (a *attempt) removeCheckDir(ctx context.Context, i int) {
	if err := os.RemoveAll(a.dir.Join(fmt.Sprintf("check-%d", i))); err != nil {
		log.FromContext(ctx).Error(err, "a check's folders could not be removed", "check", i)
	}
}

// judgeWorkspace makes the workspace safe for the checks: its
// repositories' git config is the node-agent's, and a link that leads out of
// it to what only the checks have refuses them. It returns what it changed
// in the git config, and why the checks cannot run, if they cannot.
func (a *attempt) judgeWorkspace(ctx context.Context, check string) (gitNotes []string, refusal string) {
	gitNotes, err := sanitizeGitConfig(a.dir.Workspace())
	if err != nil {
		return nil, "the workspace's git config could not be made safe for checks: " + err.Error()
	}
	if len(gitNotes) > 0 {
		// The notes name the agent's paths (a gitdir file's target):
		// redacted, as everything the run's output holds.
		log.FromContext(ctx).Info("the workspace's git config was made safe for the checks", "check", check, "changes", a.redactor.String(strings.Join(gitNotes, "; ")))
	}
	// Links the agent (or the code of a check that ran over the workspace
	// itself) left that lead out of the workspace to what only the checks
	// have. In an environment image the checks run over the overlay the
	// agent wrote (Harbor's way), which this does not judge.
	if a.env == nil {
		if err := refuseLinksOutOfReach(a.dir.Path, a.dir.Workspace(), []string{a.dir.Home(), a.dir.Tmp()}); err != nil {
			return gitNotes, err.Error()
		}
	}
	return gitNotes, ""
}

// inertCheckMessages redacts each result's message and reward error with
// the run's redactor and makes control sequences in them inert.
func inertCheckMessages(r *redact.Redactor, results []harnessv1.CheckResult) {
	for i := range results {
		results[i].Message = truncate(termsafe.String(validUTF8([]byte(r.String(results[i].Message)))), 1024)
		results[i].RewardError = truncate(termsafe.String(validUTF8([]byte(r.String(results[i].RewardError)))), 256)
	}
}

// checkGitConfig turns off what git would run or read from a repository
// the agent wrote, beyond its config (sanitizeGitConfig): hooks, a
// filesystem monitor, replacement objects (refs/replace would show another
// commit in HEAD's place), and a bare repository found without being named
// (the workspace itself made one, its config beside it). Settings from the
// environment win over the repository's own config. The objects and the
// index stay the agent's: git does not check an object read against its
// id, so an object file rewritten in place (a base commit's tree) or an
// index entry marked assume-unchanged still fools `git diff BASE`
// (docs/node-agent.md, "What is still the agent's").
var checkGitConfig = []string{
	"GIT_CONFIG_NOSYSTEM=1",
	"GIT_NO_REPLACE_OBJECTS=1",
	"GIT_CONFIG_COUNT=3",
	"GIT_CONFIG_KEY_0=core.hooksPath", "GIT_CONFIG_VALUE_0=/dev/null",
	"GIT_CONFIG_KEY_1=core.fsmonitor", "GIT_CONFIG_VALUE_1=false",
	"GIT_CONFIG_KEY_2=safe.bareRepository", "GIT_CONFIG_VALUE_2=explicit",
}

// checkPythonEnv keeps Python (3.11 on) from putting the working
// directory, the workspace, first on sys.path for -c, -m and stdin: a
// json/ the agent left there answered `python3 -m json.tool` and any check
// that imported json, a forged pass. A check that means to import the
// workspace says so (PYTHONPATH=.). Not in an environment image, whose
// checks run as its own tests do (Harbor's `python -m pytest` from /app).
var checkPythonEnv = []string{"PYTHONSAFEPATH=1"}

// checkSpec is a fresh sandbox for check i: its own empty HOME, TMPDIR and
// XDG folders (the agent's home, where startup hooks such as Python's
// usercustomize.py, `go env -w` settings or a ~/.gitconfig would sit, is
// not there), the node's PATH (read-only system folders, not the adapter's
// CLI folders), no network, and of the run dir only the workspace and the
// fixture's folder (read-only, now with its verifier part, found as
// $HARNESSFACTS_TESTS).
func (a *attempt) checkSpec(i int, tests string) (sandbox.Spec, error) {
	root := a.dir.Join(fmt.Sprintf("check-%d", i))
	home, tmp := filepath.Join(root, "home"), filepath.Join(root, "tmp")
	xdg := [][2]string{
		{"XDG_CONFIG_HOME", filepath.Join(home, ".config")},
		{"XDG_DATA_HOME", filepath.Join(home, ".local", "share")},
		{"XDG_STATE_HOME", filepath.Join(home, ".local", "state")},
		{"XDG_CACHE_HOME", filepath.Join(home, ".cache")},
	}
	// The reward folder (Harbor's /logs/verifier) is the check's own and
	// starts empty: the agent cannot plant a reward in it.
	reward := filepath.Join(root, "verifier")
	dirs := []string{home, tmp, reward}
	for _, x := range xdg {
		dirs = append(dirs, x[1])
	}
	for _, d := range dirs {
		// The run dir's top level is the node-agent's alone: the agent
		// could not have put anything there.
		if err := os.MkdirAll(d, 0o700); err != nil {
			return sandbox.Spec{}, fmt.Errorf("making the check's fresh home: %w", err)
		}
	}
	if err := os.Chmod(root, 0o711); err != nil {
		return sandbox.Spec{}, err
	}
	spec := a.baseSpec(harnessv1.EgressNone)
	spec.Network = sandbox.NetworkNone
	spec.Env = append([]string{
		"PATH=" + a.e.opts.Path,
		"HOME=" + home,
		"USER=harnessfacts",
		"LOGNAME=harnessfacts",
		"LANG=C.UTF-8",
		"TERM=dumb",
		"TMPDIR=" + tmp,
		"HARNESSFACTS_RUN=" + a.dir.Path,
		"HARNESSFACTS_FIXTURE=" + a.dir.FixtureDir(),
		"HARNESSFACTS_TESTS=" + tests,
		"HARNESSFACTS_REWARD_DIR=" + reward,
	}, checkGitConfig...)
	for _, x := range xdg {
		spec.Env = append(spec.Env, x[0]+"="+x[1])
	}
	// In an environment image the checks run in it, over the same overlay
	// the agent left (Harbor's tests see what the agent installed), with
	// the image's own environment.
	if a.env == nil {
		spec.Env = append(spec.Env, checkPythonEnv...)
	}
	spec.Env = a.environmentEnv(spec.Env)
	spec.ReadWrite = []string{a.dir.Workspace(), home, tmp, reward}
	if spec.Root != "" {
		spec.BindAt = []sandbox.BindAt{{Source: reward, Target: HarborVerifierDir}}
		if st, err := os.Stat(tests); err == nil && st.IsDir() {
			spec.BindAt = append(spec.BindAt, sandbox.BindAt{Source: tests, Target: HarborTestsDir})
		}
	}
	spec.ReadOnly = []string{a.dir.FixtureDir()}
	return spec, nil
}

// noteSetupRetries logs a sandbox whose setup failed before what it ran
// and was started again (sandbox.Result.SetupRetries); the command's own
// output says so too.
func noteSetupRetries(ctx context.Context, what string, res sandbox.Result) {
	if res.SetupRetries > 0 {
		log.FromContext(ctx).Info("the sandbox's setup failed before the command ran, and it was started again (bubblewrap issue 650: a host mount changed under bwrap)", "command", what, "retries", res.SetupRetries)
	}
}

// fromRuneStart drops the bytes of a character cut at b's start (a tail
// taken by bytes), at most three.
func fromRuneStart(b []byte) []byte {
	for i := 0; i < len(b) && i < utf8.UTFMax-1; i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	if len(b) >= utf8.UTFMax-1 {
		return b[utf8.UTFMax-1:]
	}
	return nil
}
