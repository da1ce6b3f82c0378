package runcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/prestart"
	"github.com/harnessfacts/harnessfacts/internal/runflags"
	"github.com/harnessfacts/harnessfacts/internal/startgc"
	"github.com/harnessfacts/harnessfacts/internal/termsafe"
	"github.com/harnessfacts/harnessfacts/node-agent/adapters"
	"github.com/harnessfacts/harnessfacts/node-agent/evidence"
	"github.com/harnessfacts/harnessfacts/node-agent/executor"
	"github.com/harnessfacts/harnessfacts/node-agent/fixture"
	"github.com/harnessfacts/harnessfacts/node-agent/localrun"
	"github.com/harnessfacts/harnessfacts/node-agent/redact"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

type runFlags struct {
	file        string
	fixturesDir string
	secretsDir  string
	evidenceDir string
	runRoot     string
	agentCLIs   string
	hidden      []string
	uid, gid    int
	bwrap       string
	follow      bool
	insideHosts []string
	providerCA  string
	quiet       bool
	evidenceKey string
}

// Command is `run`: one HarnessRun on this machine, as a node-agent would
// run it, with its evidence written to a folder.
func Command() *cobra.Command {
	f := runFlags{}
	cmd := &cobra.Command{
		Use:   "run -f run.yaml",
		Short: "Run one HarnessRun on this machine, without a cluster",
		Long: `Run one HarnessRun on this machine with the node-agent's executor: the same
fixture handling, sandbox, MCP token server, checks, artifacts, redaction and
evidence as on a cluster. The run is defaulted and validated exactly as the
API server would. spec.fixture.configMapRef NAME is read from the folder
--fixtures/NAME (or from the folder holding run.yaml when it has a
fixture.yaml); secretKeyRef NAME/KEY from the file --secrets/NAME/KEY.
At start it removes the run dirs of earlier local runs that were killed
(those whose owner lock no process holds) from --run-root.

While it runs, each phase and step is said on stderr as it begins (-q
turns that off); with --follow the agent's output is shown there too, as it
is produced, redacted as output.log is and with terminal control sequences
inert. (-f names the run file, as in kubectl apply -f.)

The final status is printed as YAML and the evidence is written to a new
folder evidence/<run name>/<UTC time> (the link evidence/<run name>/latest
points at the newest; earlier runs' evidence is kept), or to --evidence.
Verify it with 'harnessfacts evidence verify evidence/<run name>/latest'
(or the run's folder, or the time's). The receipt is signed, as on a
cluster, with --evidence-key (by default a key of yours, made on the first
run); add '--key' with its public part, evidence-key.pub beside it, to
check the signature too. The exit code is 0 for verdict Pass, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			return runLocal(ctx, cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.file, "file", "f", "", "the HarnessRun YAML")
	fl.StringVar(&f.fixturesDir, "fixtures", "", "folder of fixture folders, for spec.fixture.configMapRef")
	fl.StringVar(&f.secretsDir, "secrets", "", "folder of Secret folders (NAME/KEY files), for credentials")
	fl.StringVar(&f.evidenceDir, "evidence", "", "where to write the evidence, an empty or new folder (default: a new folder ./evidence/<run name>/<UTC time>, with the link ./evidence/<run name>/latest)")
	fl.StringVar(&f.runRoot, "run-root", filepath.Join(os.TempDir(), "harnessfacts-runs"), "folder of the run dirs")
	fl.StringVar(&f.agentCLIs, "agent-clis", "", "folder of the agent CLIs' commands (hack/install-agent-clis.sh PREFIX/bin; /opt/harnessfacts/agents/bin in the image); empty: PATH")
	fl.StringSliceVar(&f.hidden, "hide", nil, runflags.HideUsage)
	fl.IntVar(&f.uid, "run-as-uid", sandbox.DefaultUID, "unprivileged uid the agent runs as (default, as root: a uid of "+sandbox.LocalIDRange+" no other local run holds)")
	fl.IntVar(&f.gid, "run-as-gid", sandbox.DefaultGID, "unprivileged gid the agent runs as (default, as root: the same id as its uid)")
	fl.StringVar(&f.bwrap, "bwrap", "", "bubblewrap binary (default: bwrap on PATH)")
	fl.StringSliceVar(&f.insideHosts, "inside-host", nil, "a name egress ProviderOnly may reach at an inside address (loopback, private, link-local, CGNAT, metadata), as a HarnessPolicy's network.insideHosts allows it on a cluster; the run must allow the name too (allowHosts, providerURL)")
	fl.StringVar(&f.providerCA, "provider-ca-file", "", "PEM bundle of the CAs the model provider's certificate must chain to in the run's model gateway, instead of the system's (a private provider, a test CA), as the node-agent's flag of that name")
	fl.BoolVar(&f.follow, "follow", false, "show the agent's redacted output on stderr as it is produced")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "do not say the phases and steps on stderr")
	fl.StringVar(&f.evidenceKey, "evidence-key", defaultLocalKey(), "PEM ECDSA P-256 private key that signs the receipt, as a node-agent's does (made, mode 0600, when absent; its folder is masked in the sandbox; its public part is written beside it as evidence-key.pub); \"\" leaves the receipt unsigned")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

// errNotPass makes the exit code 1 without another message.
var errNotPass = errors.New("the run did not pass")

func runLocal(ctx context.Context, cmd *cobra.Command, f runFlags) error {
	// The executor logs what a node-agent would (a run dir it could not
	// remove, a sandbox set up again): to stderr, as lines, without
	// controller-runtime's complaint (and its stack) that no logger was set.
	logf.SetLogger(zap.New(zap.WriteTo(cmd.ErrOrStderr()), zap.ConsoleEncoder(), zap.StacktraceLevel(zapcore.PanicLevel)))
	idsGiven := cmd.Flags().Changed("run-as-uid") || cmd.Flags().Changed("run-as-gid")
	userWarning, err := checkLocalRunUser(idsGiven)
	if err != nil {
		return err
	}
	if userWarning != "" {
		cmd.PrintErrf("WARNING %s\n", userWarning)
		f.uid, f.gid = 0, 0 // the sandbox's "unset": the invoking user
	}
	hidden, err := runflags.HiddenPaths(f.hidden)
	if err != nil {
		return err
	}
	sources := localrun.Sources{FixturesDir: f.fixturesDir, SecretsDir: f.secretsDir}
	if f.fixturesDir == "" {
		// A run.yaml kept in its fixture's folder names that folder.
		if dir := filepath.Dir(f.file); fileExists(filepath.Join(dir, "fixture.yaml")) {
			sources.FixtureDir = dir
		}
	}
	// The host folders this run reads from are the harness's to read, not
	// the agent's: the sandbox shows the host's root read-only, and these
	// may sit anywhere (a CI workspace, /srv, /opt). The fixture's own
	// folder holds its verifier part, which the agent must not see before
	// its checks; the secrets folder holds keys the run did not select
	// (and the redactor does not know); the evidence folders hold other
	// runs'; the caller's home is theirs.
	hidden = append(hidden, localHostPaths(f, sources)...)
	providerCAs, err := runflags.LoadCAs(f.providerCA)
	if err != nil {
		return fmt.Errorf("--provider-ca-file: %w", err)
	}
	progress := &localProgress{w: cmd.ErrOrStderr(), quiet: f.quiet, start: time.Now()}
	key, pubFile, err := localSigningKey(f.evidenceKey)
	if err != nil {
		return err
	}
	if key != nil {
		// Whatever --hide says, the agent never sees the key's folder.
		hidden = append(hidden, filepath.Dir(pubFile))
	}
	opts := executor.Options{
		Sources: sources, RunRoot: f.runRoot, Hidden: hidden, UID: f.uid, GID: f.gid,
		Sandbox: sandbox.Options{Bwrap: f.bwrap}, Adapters: adapters.New(adapters.Config{CLIDir: f.agentCLIs}),
		Observer: progress, InsideHosts: f.insideHosts, SigningKey: key, ProviderCAs: providerCAs,
		InsideAllowedBy: "harnessfacts run --inside-host",
		// The preflight this process's init began, where it is of these
		// options.
		Preflight: func(o sandbox.Options) []sandbox.Availability {
			if avail, ok := prestart.Preflight(o); ok {
				return avail
			}
			return sandbox.Preflight(context.Background(), o)
		},
	}
	if f.follow {
		opts.Live = progress
	}
	if os.Geteuid() == 0 && !idsGiven && runtime.GOOS == "linux" {
		// Local runs at once (with run roots of their own, which no run
		// hides from another) must not share a uid: each takes one no
		// other `harnessfacts run` holds.
		if opts.IDs, err = sandbox.LocalIDs(); err != nil {
			return err
		}
	}
	// The executor's sandbox preflight (a sandbox start, mostly bwrap's
	// and the kernel's work) runs on from New while this goroutine
	// validates the run (CPU: its CEL rules), and on into the attempt's
	// first steps, which need none of it (the fixture, the run dir): the
	// attempt waits for it where it chooses its sandbox. Close waits for
	// it whatever happens, so that no preflight is left behind by a run
	// refused here.
	exec, execErr := executor.New(opts)
	// The redactor's rules, while the run is validated and the preflight
	// runs: a local run needs them every time. Started after the
	// preflight's goroutine, which mostly waits on bwrap: started first,
	// these rules (CPU) took its place and it waited for a core (local
	// run 4.5-7 ms slower, three rounds of 40-60 alternated).
	go redact.Preload()
	run, err := localrun.ReadRunFile(ctx, f.file)
	if execErr != nil {
		if err != nil {
			return err // the run's own fault first
		}
		return execErr
	}
	defer func() { _ = exec.Close() }()
	if err != nil {
		return err
	}
	// Where the evidence goes is checked before the agent runs: found
	// unusable only afterwards, the run's status and evidence were lost.
	if err := evidenceDirUsable(f.evidenceDir, run.Name); err != nil {
		return err
	}
	if opts.IDs != nil {
		// Runs as root each have a uid of their own: what every user may
		// read, another run's agent may.
		exposed := exposedSources(run, sources)
		for _, p := range slices.Sorted(maps.Keys(exposed)) {
			cmd.PrintErrf("WARNING %s %s is readable by every user of this machine: this run's sandbox hides it, "+
				"but the agent of another local run at the same time can read it; keep it in a folder only its owner may read (chmod o-rwx)\n", exposed[p], p)
		}
	}
	// The executor logs a degraded verdict for the node-agent's log; here
	// this line says it, once, when the preflight has given it (the run's
	// first steps do not wait for it), and before the final status.
	warned := make(chan struct{})
	go func() {
		defer close(warned)
		for _, m := range exec.SandboxModes(logf.IntoContext(ctx, logr.Discard())) {
			if m.Available && sandbox.Degraded(m.Message) {
				progress.warn("WARNING %s: %s", m.Mode, m.Message)
			}
		}
	}()
	defer func() { <-warned }()
	// A local run killed before its end (kill -9, a closed laptop) leaves
	// its run dir, credential copies included. Those whose owner lock no
	// process holds are removed now; a run dir another `harnessfacts run`
	// still holds is left alone, so runs may share a run root.
	removed, err := exec.RemoveAbandoned()
	for _, d := range removed {
		cmd.PrintErrf("removed the run dir %s that a killed run left behind\n", d)
	}
	if err != nil {
		cmd.PrintErrf("WARNING could not remove every abandoned run dir in %s: %v\n", f.runRoot, err)
	}
	// Its sandboxes' cgroups too, empty once the kernel has reaped them.
	cgs, err := exec.RemoveAbandonedCgroups()
	for _, d := range cgs {
		cmd.PrintErrf("removed the cgroup %s that a killed run left behind\n", d)
	}
	if err != nil {
		cmd.PrintErrf("WARNING could not remove every abandoned run cgroup: %v\n", err)
	}
	progress.say("HarnessRun %s: Running", run.Name)
	final, res := localrun.Run(ctx, exec, run, "")
	<-warned
	progress.say("HarnessRun %s: %s, verdict %s (%s)", run.Name, final.Status.Phase, orDash(string(final.Status.Verdict)), orDash(final.Status.Reason))
	evidenceDir := f.evidenceDir
	if res.Evidence != nil {
		if evidenceDir == "" {
			// Each run its own folder: re-running is normal, and earlier
			// evidence is never overwritten.
			if evidenceDir, err = newRunEvidenceDir(run.Name, time.Now()); err != nil {
				return fmt.Errorf("making the evidence folder: %w", err)
			}
		}
		if err := res.Evidence.WriteDir(evidenceDir); err != nil {
			return fmt.Errorf("writing the evidence: %w", err)
		}
		if f.evidenceDir == "" {
			if err := pointLatest(filepath.Dir(evidenceDir), filepath.Base(evidenceDir)); err != nil {
				// The evidence is written; only the shortcut is missing
				// (Windows without the right to make links).
				cmd.PrintErrf("WARNING could not point %s at the new evidence: %v\n", filepath.Join(filepath.Dir(evidenceDir), LatestLink), err)
			}
		}
		if final.Status.Evidence != nil {
			final.Status.Evidence.ConfigMapName = ""
		}
	}
	out, err := yaml.Marshal(map[string]any{"status": final.Status})
	if err != nil {
		return err
	}
	if _, err := cmd.OutOrStdout().Write(out); err != nil {
		return err
	}
	for _, w := range res.Warnings {
		cmd.PrintErrf("WARNING %s: %s\n", w.Reason, w.Message)
	}
	if res.Evidence != nil {
		cmd.PrintErrf("evidence written to %s\n", evidenceDir)
		if key != nil {
			cmd.PrintErrf("signed by key %s; verify with: harnessfacts evidence verify %s --key %s\n", key.Public().ID, evidenceDir, pubFile)
		}
	}
	if final.Status.Verdict != harnessv1.VerdictPass {
		return errNotPass
	}
	return nil
}

// evidenceDirUsable fails when the evidence of a run named name could not
// be written: --evidence is neither absent nor an empty folder, or the
// default folder ./evidence/NAME cannot be made.
func evidenceDirUsable(dir, name string) error {
	if dir == "" {
		if _, err := ownEvidenceDir(name); err != nil {
			return err
		}
		return nil
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--evidence %s: %w", dir, err)
	case len(entries) > 0:
		return fmt.Errorf("--evidence %s is not empty: name a new or empty folder", dir)
	}
	return nil
}

// localHostPaths are the host folders and files a local run reads (its
// run file, fixtures, secrets and evidence folders), the git repositories
// they are kept in and the caller's home, absolute, each also as its links
// resolve: the sandbox masks them. The root itself is never among them (a
// run file at / names it).
func localHostPaths(f runFlags, sources localrun.Sources) []string {
	// ./evidence too when --evidence names another folder: it holds earlier
	// runs' evidence, their artifacts (answers) among it.
	paths := []string{f.file, f.fixturesDir, sources.FixtureDir, f.secretsDir, f.evidenceDir, fixture.LocalEvidenceDir}
	// A task set is mostly kept in git: the fixture's folder hidden, its
	// verifier part was still in the repository's objects above it.
	for _, p := range []string{f.file, f.fixturesDir, sources.FixtureDir, f.secretsDir} {
		if p != "" {
			paths = append(paths, enclosingGitDirs(p)...)
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		paths = append(paths, home)
	}
	var out []string
	for _, p := range paths {
		if p == "" {
			continue
		}
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		for _, q := range []string{abs, resolved(abs)} {
			if q != "" && q != "/" && !slices.Contains(out, q) {
				out = append(out, q)
			}
		}
	}
	return out
}

// enclosingGitDirs are the git folders of every repository p is in: the
// ".git" of p and of each folder above it, and, where ".git" is a file (a
// linked worktree, a submodule), the folder it names and that folder's
// common one, which hold the objects.
func enclosingGitDirs(p string) []string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return nil
	}
	var out []string
	for dir := abs; ; dir = filepath.Dir(dir) {
		dotGit := filepath.Join(dir, ".git")
		if fi, err := os.Lstat(dotGit); err == nil {
			out = append(out, dotGit)
			if fi.Mode().IsRegular() {
				out = append(out, linkedGitDirs(dotGit)...)
			}
		}
		if dir == filepath.Dir(dir) {
			return out
		}
	}
}

// linkedGitDirs reads a ".git" file ("gitdir: PATH") and returns the
// folder it names and, when that folder has a "commondir" file, the common
// folder (a worktree's main repository), each absolute. A folder is taken
// only when it holds HEAD, as git itself checks: a stray ".git" file above
// the sources cannot name any folder of the machine for the run to hide.
func linkedGitDirs(dotGit string) []string {
	data, ok := smallFile(dotGit)
	if !ok {
		return nil
	}
	gitDir, ok := strings.CutPrefix(strings.TrimSpace(data), "gitdir:")
	if !ok {
		return nil
	}
	gitDir = strings.TrimSpace(gitDir)
	if !filepath.IsAbs(gitDir) {
		gitDir = filepath.Join(filepath.Dir(dotGit), gitDir)
	}
	gitDir = filepath.Clean(gitDir)
	if _, ok := smallFile(filepath.Join(gitDir, "HEAD")); !ok {
		return nil
	}
	out := []string{gitDir}
	if common, ok := smallFile(filepath.Join(gitDir, "commondir")); ok {
		c := strings.TrimSpace(common)
		if !filepath.IsAbs(c) {
			c = filepath.Join(gitDir, c)
		}
		if _, ok := smallFile(filepath.Join(c, "HEAD")); ok {
			out = append(out, filepath.Clean(c))
		}
	}
	return out
}

// smallFile is the content of p when it is a regular file (not a link, a
// FIFO or a device, which a read could wait on for ever) of at most 4 KiB.
func smallFile(p string) (string, bool) {
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 4096 {
		return "", false
	}
	data, err := os.ReadFile(p)
	return string(data), err == nil
}

// resolved is p with its links resolved, "" when it does not exist.
func resolved(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return r
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// LatestLink names, in a run's evidence folder, the link to its newest
// evidence.
const LatestLink = "latest"

// newRunEvidenceDir makes a new folder for one run's evidence under
// runDir, named for the UTC time (with -2, -3, ... when a run of the same
// second has one), and returns it. It never reuses a folder.
//
// The folders are its owner's alone (0700): they hold the agent's artifacts
// (a task's answers) and output, and another run's sandbox, whose uid is
// not the caller's, must not read them wherever they are (the sandbox
// masks only this run's evidence folders). A run's folder made by an older
// version, readable by all, is closed too.
func newRunEvidenceDir(name string, now time.Time) (string, error) {
	runDir, err := ownEvidenceDir(name)
	if err != nil {
		return "", err
	}
	if fi, err := os.Lstat(runDir); err == nil && fi.IsDir() && fi.Mode().Perm()&0o077 != 0 {
		_ = os.Chmod(runDir, fi.Mode().Perm()&0o700) // best effort: a folder of another user's stays as it is
	}
	base := now.UTC().Format("20060102T150405Z")
	for i := 1; i < 1000; i++ {
		name := base
		if i > 1 {
			name = fmt.Sprintf("%s-%d", base, i)
		}
		dir := filepath.Join(runDir, name)
		err := os.Mkdir(dir, 0o700)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("too many runs in %s within one second", runDir)
}

// ownEvidenceDir makes ./evidence/NAME (fixture.LocalEvidenceDir), each of
// its two folders made if missing, and refuses either when it is a link or
// not a folder. The default evidence folder is in the folder the user runs
// from, mostly a repository of tasks, which may carry an evidence folder:
// a planted link evidence/NAME -> /etc had a root run make /etc 0700 and
// write the evidence and a latest link into it. A link there is the
// repository's, not the user's choice; --evidence DIR is.
func ownEvidenceDir(name string) (string, error) {
	dir := fixture.LocalEvidenceDir
	for _, p := range []string{dir, filepath.Join(dir, name)} {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return "", fmt.Errorf("making the evidence folder: %w", err)
			}
			if fi, err = os.Lstat(p); err != nil {
				return "", fmt.Errorf("making the evidence folder: %w", err)
			}
		case err != nil:
			return "", fmt.Errorf("the evidence folder: %w", err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("%s is a symbolic link: the evidence is written to a folder of its own there, never through a link (a repository may carry one); remove it, or name a folder with --evidence", p)
		}
		if !fi.IsDir() {
			return "", fmt.Errorf("%s is not a folder: remove it, or name a folder with --evidence", p)
		}
	}
	return filepath.Join(dir, name), nil
}

// pointLatest points runDir/latest at target (a sibling) by renaming a new
// link over it, so a reader never sees it missing.
func pointLatest(runDir, target string) error {
	tmp := filepath.Join(runDir, fmt.Sprintf(".%s.%d", LatestLink, os.Getpid()))
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(runDir, LatestLink)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// localProgress says on stderr what a local run does as it does it, and
// (--follow) shows the agent's output there: the executor's Observer and
// LiveOutput.
type localProgress struct {
	mu    sync.Mutex
	w     io.Writer
	quiet bool
	start time.Time
	live  *liveTerminal
}

func (p *localProgress) say(format string, args ...any) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.live; l != nil {
		// The agent's output ended before the next step began.
		l.endLocked()
	}
	fmt.Fprintf(p.w, "[%5.1fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// warn says a warning on stderr, quiet or not, as a line of its own
// between the steps and the agent's output.
func (p *localProgress) warn(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.live; l != nil {
		l.endLocked()
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// Step implements executor.Observer.
func (p *localProgress) Step(run *harnessv1.HarnessRun, step string) {
	p.say("HarnessRun %s: %s", run.Name, step)
}

// interruptible is ctx ended by the first SIGINT or SIGTERM, with that as
// the run's stop cause: the run ends Stopped, saying it was interrupted
// here (not the executor's wording for a node-agent's own end). Later
// signals are caught and dropped until the command returns: a second
// Ctrl-C must not kill it while it removes the run dir and the credential
// copies in it.
func interruptible(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sigs:
			cancel(&executor.StopCause{Reason: harnessv1.ReasonStopped, Message: fmt.Sprintf("harnessfacts run was interrupted (%v)", s)})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel(nil)
	}
}

// AgentStarted implements executor.Observer.
func (p *localProgress) AgentStarted(run *harnessv1.HarnessRun, mode sandbox.Mode, latency time.Duration) {
	// The start is over: the process now lives as long as the agent, and
	// its heap must be collected as usual (package startgc held it back).
	startgc.Resume()
	p.say("HarnessRun %s: the agent started in %s, %.2fs after the attempt began", run.Name, mode, latency.Seconds())
}

// Open implements executor.LiveOutput: the agent's redacted output goes to
// stderr, made inert, between lines that mark it, each of its lines
// behind liveLinePrefix.
func (p *localProgress) Open(run *harnessv1.HarnessRun) io.WriteCloser {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := &liveTerminal{p: p, run: run.Name, lines: termsafe.NewLinePrefixer(p.w, liveLinePrefix)}
	l.w = termsafe.NewWriter(l.lines)
	p.live = l
	return p.live
}

// liveLinePrefix starts every line of the agent's output on the terminal:
// no line the agent prints can pass for one of harnessfacts' own (the end
// of its output, a phase, "Succeeded, verdict Pass"), which an agent did
// by printing the end marker and the lines it wanted the user to read.
const liveLinePrefix = termsafe.LinePrefix

type liveTerminal struct {
	p      *localProgress
	run    string
	w      *termsafe.Writer
	lines  *termsafe.LinePrefixer
	opened bool
	ended  bool
}

func (l *liveTerminal) Write(b []byte) (int, error) {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	if l.ended {
		return len(b), nil
	}
	if !l.opened {
		l.opened = true
		fmt.Fprintf(l.p.w, "----- %s: the agent's output (redacted) -----\n", l.run)
	}
	return l.w.Write(b)
}

// endLocked closes the frame of the agent's output, once it was opened.
func (l *liveTerminal) endLocked() {
	if !l.opened || l.ended {
		return
	}
	l.ended = true
	_ = l.w.Flush()
	if !l.lines.AtLineStart() {
		// The agent's last line had no newline: the marker goes on a
		// line of its own.
		fmt.Fprintln(l.p.w)
	}
	fmt.Fprintf(l.p.w, "----- %s: end of the agent's output -----\n", l.run)
}

func (l *liveTerminal) Close() error {
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	l.endLocked()
	return nil
}

// defaultLocalKey is the local runs' signing key: the user's own, kept in
// their config folder so that every run of theirs is signed by one key.
// Windows has no 0600 for LoadOrCreateKey to check: there local receipts
// are unsigned unless --evidence-key names a key.
func defaultLocalKey() string {
	dir, err := os.UserConfigDir()
	if err != nil || runtime.GOOS == "windows" {
		return ""
	}
	return filepath.Join(dir, "harnessfacts", "keys", "evidence-key.pem")
}

// localSigningKey loads (or makes) the key at path and writes its public
// part beside it (evidence-key.pub), for `evidence verify --key`. An empty
// path is no key.
func localSigningKey(path string) (*evidence.Key, string, error) {
	if path == "" {
		return nil, "", nil
	}
	path, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	key, err := evidence.LoadOrCreateKey(path)
	if err != nil {
		return nil, "", fmt.Errorf("--evidence-key: %w; name another key with --evidence-key, or --evidence-key \"\" to leave the receipt unsigned", err)
	}
	pub := filepath.Join(filepath.Dir(path), strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))+".pub")
	if b, err := os.ReadFile(pub); err != nil || string(b) != key.Public().PEM {
		if err := os.WriteFile(pub, []byte(key.Public().PEM), 0o644); err != nil { //nolint:gosec // a public key, for anyone to verify with
			return nil, "", fmt.Errorf("writing the public key %s: %w", pub, err)
		}
	}
	return key, pub, nil
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
