// Package sandbox runs one untrusted command (a coding agent, a fixture check)
// under the strongest isolation the host offers, with memory, process and time
// limits, and reports how it ended.
//
// There is one interface, Runner, and one implementation per isolation mode:
//
//   - ModeBwrap (Linux): bubblewrap with every namespace unshared, the host
//     root read-only, secret directories masked by tmpfs, the run directory
//     read-write, run as an unprivileged host uid, limited by a per-run cgroup
//     (v1 or v2) that is killed as a whole.
//   - ModeAppContainer (Windows): an AppContainer with zero capabilities inside
//     a Job Object, write access granted to the run directory only.
//   - ModePlain (every OS): a plain child process with exactly the given
//     environment. It is not a sandbox; it is used only when the caller's
//     policy says so, and every Result says so in words.
//
// The package knows nothing about Kubernetes. It streams the raw output of the
// command into the io.Writers of the Spec; bounding (Capture) and redaction are
// writers the caller composes, see Capture.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Mode is an isolation mode.
type Mode string

const (
	// ModeBwrap is bubblewrap plus a per-run cgroup (Linux).
	ModeBwrap Mode = "bwrap"
	// ModeAppContainer is an AppContainer inside a Job Object (Windows).
	ModeAppContainer Mode = "appcontainer"
	// ModePlain is a plain child process: no isolation, see PlainWarning.
	ModePlain Mode = "plain"
)

// Policy says whether a run may go ahead without a sandbox.
type Policy string

const (
	// PolicyRequired refuses to run when no sandbox mode works on this host.
	PolicyRequired Policy = "Required"
	// PolicyAllowFallback runs a plain child, with Result.Warning set, when no
	// sandbox mode works.
	PolicyAllowFallback Policy = "AllowFallback"
)

// Network is what the command may reach.
type Network int

const (
	// NetworkNone gives the command its own network namespace with only a
	// loopback interface: nothing on the host, not even the host's 127.0.0.1,
	// is reachable. This is the default.
	NetworkNone Network = iota
	// NetworkShared shares the caller's network stack, loopback and
	// abstract sockets included. The node-agent never uses it: it is the
	// control case of the tests.
	NetworkShared
	// NetworkUserMode gives the command its own network namespace whose
	// only way out is slirp4netns, a user-mode network stack: it reaches
	// what the caller's network reaches (TCP and UDP; ping needs no more),
	// but never the caller's loopback (127.0.0.1 through the stack's
	// gateway is refused) nor the caller's abstract unix sockets, and its
	// /etc/resolv.conf names the stack's DNS forwarder (10.0.2.3), nor
	// UserModeUnreachable. Linux only; needs slirp4netns (Debian's
	// package).
	NetworkUserMode
)

// userModeUnreachable: the link-local range, where AWS, GCP, Azure and
// OpenStack serve their instance metadata (169.254.169.254, AWS's task
// credentials at 169.254.170.2), Alibaba's metadata address (in the CGNAT
// range), Oracle's legacy one and Azure's platform address (WireServer and
// its host agent, in public space): each hands out the node's own cloud
// credentials or what makes them. egress's own list of metadata addresses is checked against
// this one (TestUserModeBlocksEveryMetadataAddress). slirp4netns serves no
// IPv6, so AWS's fd00:ec2::254 is out of reach already.
var userModeUnreachable = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("100.100.100.200/32"),
	netip.MustParsePrefix("192.0.0.192/32"),
	netip.MustParsePrefix("168.63.129.16/32"),
}

// UserModeUnreachable are the prefixes a NetworkUserMode sandbox never
// reaches, whatever the caller's network does: slirp4netns connects from
// the caller's network namespace and filters nothing, and a run that may
// reach the node's network must still not get the node's cloud identity.
// The runner routes them to a blackhole inside the sandbox.
func UserModeUnreachable() []netip.Prefix { return slices.Clone(userModeUnreachable) }

func (n Network) String() string {
	switch n {
	case NetworkNone:
		return "None"
	case NetworkShared:
		return "Shared"
	case NetworkUserMode:
		return "UserMode"
	}
	return fmt.Sprintf("Network(%d)", int(n))
}

const (
	// DefaultMemoryBytes is the memory limit used when Limits.MemoryBytes is 0.
	DefaultMemoryBytes int64 = 2 << 30
	// DefaultMaxProcesses is the task limit used when Limits.MaxProcesses is 0.
	// On Linux it counts threads as well as processes (the pids controller
	// does); Node.js alone starts about a dozen.
	DefaultMaxProcesses int64 = 1024
	// DefaultUID and DefaultGID are the host ids a sandboxed command runs as
	// when the Spec names none (nobody/nogroup on Debian).
	DefaultUID = 65534
	// DefaultGID is the host gid a sandboxed command runs as (nogroup).
	DefaultGID = 65534
)

// Limits bound one run. Zero values mean the defaults. There is deliberately
// no address-space limit (RLIMIT_AS): V8 reserves far more address space than
// it uses, so such a limit kills Node.js programs that would fit in memory.
type Limits struct {
	// MemoryBytes is the memory limit of the whole process tree
	// (DefaultMemoryBytes when 0). Exceeding it OOM-kills the tree on Linux.
	MemoryBytes int64
	// MaxProcesses is the number of tasks the tree may have at once
	// (DefaultMaxProcesses when 0).
	MaxProcesses int64
	// Timeout is the wall-clock limit; 0 means only the context bounds the run.
	Timeout time.Duration
}

// WithDefaults returns l with zero fields set to their defaults.
func (l Limits) WithDefaults() Limits {
	if l.MemoryBytes <= 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	if l.MaxProcesses <= 0 {
		l.MaxProcesses = DefaultMaxProcesses
	}
	return l
}

// Spec describes one command to run.
type Spec struct {
	// Argv is the command and its arguments; Argv[0] is looked up in the PATH
	// of Env when it has no slash (bwrap) or in the host PATH (plain).
	Argv []string
	// Dir is the working directory, an absolute path, normally the run
	// directory or a directory inside it.
	Dir string
	// Env is the complete environment as KEY=value strings. The sandbox adds
	// nothing from the host: the caller supplies PATH, locale, HOME, TMPDIR
	// (inside the run directory) and the run's selected credentials. Values
	// never appear on any command line.
	Env []string
	// ReadWrite are paths the command may write (the run directory). They are
	// made owned by UID/GID before the run so that the unprivileged user can
	// write them.
	ReadWrite []string
	// ReadOnly are extra paths the command may read and execute. On Linux the
	// whole host root is already read-only, so these only matter inside
	// Hidden paths; on Windows they get read+execute grants (the runtime copy).
	ReadOnly []string
	// Hidden are directories masked by an empty tmpfs: the node-agent's state
	// and keys, the service-account token directory, host home directories.
	Hidden []string
	// Limits bound memory, processes and time.
	Limits Limits
	// Network is NetworkNone (default), NetworkUserMode or NetworkShared.
	Network Network
	// Unreachable are more IPv4 prefixes a NetworkUserMode sandbox never
	// reaches, beside UserModeUnreachable: the caller's own services that
	// judge clients by their address, which the sandbox's connections
	// share (slirp4netns connects from the caller's network namespace).
	Unreachable []netip.Prefix
	// Stdin is what the command reads on its standard input: the agent's
	// prompt, so that it is on no command line. Nil means /dev/null (the
	// NUL device on Windows). It is never a terminal.
	Stdin io.Reader
	// Stdout and Stderr receive the raw output as it is produced. Nil discards
	// it. They may be called from two goroutines at once unless they are the
	// same comparable value; Capture is safe either way.
	Stdout, Stderr io.Writer
	// UID and GID are the unprivileged host ids the command runs as; 0 means
	// DefaultUID/DefaultGID. Host root cannot be requested.
	UID, GID int
	// Root, when set, is the sandbox's root file system instead of the
	// host's read-only root: an environment image's writable overlay
	// (envimage.Mount), bound read-write at /. The command runs as uid and
	// gid 0 inside, mapped to UID/GID on the host, so it may write anywhere
	// in that root and is nobody outside. Nothing of the host is visible
	// but /dev (bwrap's minimal one), a fresh /proc and /tmp, and the paths
	// of ReadOnly and ReadWrite, bound at their host paths. Linux (bwrap)
	// only; the other runners refuse it.
	Root string
	// BindAt are folders bound read-write at another path inside a Root
	// (the checks' /logs/verifier): the target is made in the root's
	// writable overlay, and what the root held there is hidden. Only with
	// Root.
	BindAt []BindAt
	// rootDests maps the mounts a Root's links move to where they are
	// made (rootTargets), set by the runner.
	rootDests map[string]string
	// DevIn is a folder of the caller's in which the bwrap runner makes the
	// mount point of the sandbox's own /dev (its devpts bounded at
	// MaxPtys ptys; see docs/sandbox.md), and leaves it, empty and
	// unmounted, for the caller to remove: removing a folder that is a
	// mount point detaches that mount from every mount namespace, another
	// sandbox's in its setup among them (bubblewrap issue 650), so a
	// caller with sandboxes side by side removes it when none is starting
	// (the node-agent's run dir). Empty: the system's temporary folder,
	// removed when Run returns.
	DevIn string
	// devDir is that /dev, set by the runner ("" leaves bwrap's --dev);
	// ptsDir is a devpts alone, for --dev's pts, where the runner may
	// not make devices (devInstance.ptsOnly).
	devDir, ptsDir string
	// Loopback are the TCP addresses on the command's loopback the caller
	// serves (see Loopback), listened on before the command starts.
	Loopback []Loopback
	// netns is the network namespace the bwrap runner made for the
	// command (newNetns), nil where it is shared.
	netns *os.File
	// Prepared, when set, is this runner's parts made ahead for this spec
	// (Preparer): Run takes them, where they were made for its limits and
	// network, instead of making its own. The caller closes it after Run
	// (a no-op once taken).
	Prepared *Prepared
	// Started, when set, is called once when the command has been started
	// in the sandbox and let go (bwrap started in its cgroup and network;
	// the AppContainer process resumed), before Run waits for it: for a
	// start-latency metric and a live view. It must return quickly.
	Started func()
}

// BindAt binds Source (a host folder) at Target inside the sandbox.
type BindAt struct {
	Source, Target string
}

func (s Spec) started() {
	if s.Started != nil {
		s.Started()
	}
}

func (s Spec) validate() error {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return errors.New("sandbox: empty argv")
	}
	// No argument, variable or path may hold a NUL byte: none can carry
	// one to the payload (execve ends each string at it), and bwrap's
	// options travel NUL-separated (--args), where one would start an
	// option of its own ("x\x00--share-net").
	for i, a := range s.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("sandbox: argument %d holds a NUL byte", i)
		}
	}
	for _, kv := range s.Env {
		if strings.IndexByte(kv, 0) >= 0 {
			k, _, _ := strings.Cut(kv, "=") // the value may be a credential
			return fmt.Errorf("sandbox: the environment variable %q holds a NUL byte", redactedKey(k))
		}
	}
	for _, group := range [][]string{{s.Dir, s.Root}, s.ReadWrite, s.ReadOnly, s.Hidden} {
		for _, p := range group {
			if strings.IndexByte(p, 0) >= 0 {
				return fmt.Errorf("sandbox: path %q holds a NUL byte", p)
			}
		}
	}
	for _, b := range s.BindAt {
		if strings.IndexByte(b.Source+b.Target, 0) >= 0 {
			return fmt.Errorf("sandbox: bind %q at %q holds a NUL byte", b.Source, b.Target)
		}
	}
	if !isAbs(s.Dir) {
		return fmt.Errorf("sandbox: working directory %q is not absolute", s.Dir)
	}
	for _, kv := range s.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("sandbox: environment entry without KEY=: %q", redactedKey(kv))
		}
	}
	if s.Root != "" && !isAbs(s.Root) {
		return fmt.Errorf("sandbox: root %q is not absolute", s.Root)
	}
	for _, b := range s.BindAt {
		if s.Root == "" {
			return errors.New("sandbox: a bind at another path needs a Root")
		}
		if !isAbs(b.Source) || !isAbs(b.Target) {
			return fmt.Errorf("sandbox: bind %q at %q: paths must be absolute", b.Source, b.Target)
		}
	}
	for _, group := range [][]string{s.ReadWrite, s.ReadOnly, s.Hidden} {
		for _, p := range group {
			if !isAbs(p) {
				return fmt.Errorf("sandbox: path %q is not absolute", p)
			}
		}
	}
	if s.UID < 0 || s.GID < 0 {
		return errors.New("sandbox: negative uid or gid")
	}
	seen := map[netip.AddrPort]bool{}
	for _, l := range s.Loopback {
		a, err := l.check()
		if err != nil {
			return err
		}
		if seen[a] {
			return fmt.Errorf("sandbox: loopback listener %s given twice", a)
		}
		seen[a] = true
	}
	return nil
}

// redactedKey keeps at most the start of an environment entry for an error
// message, since the entry may be a credential.
func redactedKey(kv string) string {
	if len(kv) > 8 {
		return kv[:8] + "…"
	}
	return kv
}

func (s Spec) ids() (uid, gid int) {
	return EffectiveIDs(s.UID, s.GID)
}

// EffectiveIDs are the uid and gid a sandbox of uid/gid runs as: 0 means the
// default, DefaultUID/DefaultGID for root (which can run it as anyone),
// else this process's own, the only ones it may run it as.
func EffectiveIDs(uid, gid int) (int, int) {
	if uid == 0 {
		uid = DefaultUID
		if e := os.Geteuid(); e > 0 {
			uid = e
		}
	}
	if gid == 0 {
		gid = DefaultGID
		if e := os.Getegid(); e > 0 && os.Geteuid() > 0 {
			gid = e
		}
	}
	return uid, gid
}

// Result is how a run ended.
type Result struct {
	// Mode is the isolation mode that was used.
	Mode Mode
	// ExitCode is the exit status, or -1 when the command was killed by a
	// signal that the runner saw directly (then Signal is set). Under bwrap a
	// command killed by signal N is reported by bwrap as 128+N; the runner
	// reports those as Signal N too, with ExitCode 128+N.
	ExitCode int
	// Signal is the number of the signal that killed the command, or 0.
	Signal int
	// OOMKilled is true when the memory limit was hit and the kernel (or the
	// job object) killed or starved a process of the tree.
	OOMKilled bool
	// OOMCause says, when OOMKilled, what passed the memory limit when it
	// was more than the tree's memory as the kernel bounds it: on cgroup
	// v1, where the memory limit does not bound socket buffers, "its TCP
	// socket buffers (N MiB) and the rest of its memory (M MiB) together
	// passed it". Empty when the kernel's OOM killer fired.
	OOMCause string
	// TimedOut is true when Limits.Timeout or the context's deadline ended
	// the run; the whole tree was then killed.
	TimedOut bool
	// Duration is the wall time from start to the end of the tree.
	Duration time.Duration
	// PeakMemory is the peak memory use of the tree in bytes where the
	// cgroup or job reports it, else 0.
	PeakMemory int64
	// Warning is set, in plain words, when the run was not sandboxed.
	Warning string
	// Seccomp names the seccomp filter the command ran under and the sha256
	// of its program ("name@sha256:…"), or is empty when none applied (the
	// plain mode; Windows has none).
	Seccomp string
	// SetupRetries counts the sandbox's starts that failed in its own
	// setup, before the command ran, and were made again (bwrap: a host
	// mount that changed under it). Each is also said on the command's
	// stderr.
	SetupRetries int
	// cgroup describes the cgroup that bound the run (its version and
	// controllers, cgroupDescription), for the preflight's verdict; ""
	// where none did.
	cgroup string
	// ptysBounded: the sandbox had a devpts of its own of at most MaxPtys
	// (newDevInstance), for the preflight's verdict.
	ptysBounded bool
	// ownDev: the sandbox's /dev was the runner's (devInstance), not
	// bwrap's --dev.
	ownDev bool
}

// Runner runs commands in one isolation mode.
type Runner interface {
	// Mode is the isolation mode of this runner.
	Mode() Mode
	// Run runs spec and waits for the whole process tree to end. When ctx is
	// done or Limits.Timeout passes, every process of the tree is killed and
	// Run returns after they are gone. The error is non-nil when the command
	// could not be started or cleaned up, or when ctx was cancelled; a
	// command that ran and failed is a Result with a non-zero ExitCode.
	Run(ctx context.Context, spec Spec) (Result, error)
}

// Preparer is a Runner that makes a sandbox's parts ahead of its Run:
// its cgroup and network namespace on Linux. A caller that knows its next
// sandbox (the next check's) has them made while the one before it runs,
// off the next start's path. Prepare takes the spec the Run will get (its
// limits and network count; Loopback must be empty).
type Preparer interface {
	Prepare(spec Spec) (*Prepared, error)
}

// Prepared is what a Preparer made for a spec, until a Run takes it or
// Close removes it.
type Prepared struct {
	mu    sync.Mutex
	parts *preparedParts // nil once taken or closed
}

// Close removes the parts no Run took. It is safe to call more than once,
// on nil, and after the Run that took them.
func (p *Prepared) Close() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	parts := p.parts
	p.parts = nil
	p.mu.Unlock()
	if parts == nil {
		return nil
	}
	return parts.remove()
}

// Options configure the runners of this host.
type Options struct {
	// Bwrap is the bubblewrap binary; "" looks up "bwrap" in PATH.
	Bwrap string
	// Slirp4netns is the user-mode network stack of NetworkUserMode runs;
	// "" looks up "slirp4netns" in PATH when such a run starts.
	Slirp4netns string
	// CgroupParent is the cgroup (relative to each hierarchy's root) under
	// which per-run cgroups are made; "" means the caller's own cgroup.
	CgroupParent string
	// MoveToLeafCgroup makes PlaceNodeAgent, on a cgroup v2 host with
	// CgroupParent "", move every process of the caller's own cgroup into
	// "<own>/agent" even without a memory limit. The kernel's
	// no-internal-processes rule forbids enabling the memory and pids
	// controllers below a cgroup that holds processes, so a node-agent in
	// its own container or systemd unit (Delegate=yes) needs this, as
	// container-in-container entrypoints do. Linux only.
	MoveToLeafCgroup bool
	// CgroupMount is the cgroup2 mount per-run cgroups are made in on a
	// unified host ("" means DefaultCgroupMount); WritableCgroup2 finds or
	// makes one in a pod, where the runtime mounts /sys/fs/cgroup read-only.
	// Linux only.
	CgroupMount string

	// runParents, set by PlaceNodeAgent, are the cgroups (relative to each
	// hierarchy's mount, keyed by v1 controller name, "" for v2) below which
	// per-run cgroups are made: fixed once, so that a node-agent that moved
	// into its leaf never nests runs below that leaf.
	runParents map[string]string
}

// PlaceNodeAgent is called once when the node-agent starts, before any run
// or preflight. It fixes where per-run cgroups are made and, when asked,
// puts the calling process into a leaf cgroup of its own beside them:
//
//   - with memoryLimit > 0 (or, on cgroup v2, opts.MoveToLeafCgroup with no
//     CgroupParent) the process moves into <own>/agent (AgentLeaf), where
//     <own> is the cgroup it started in (its container's), and memoryLimit
//     becomes that leaf's hard limit, without swap. On cgroup v2 every
//     process of <own> moves, as the no-internal-processes rule requires;
//     on v1 the caller alone (in the memory and pids hierarchies).
//   - per-run cgroups are made as harnessfacts/run-<random> below
//     opts.CgroupParent, else below <own>: beside the leaf, never inside it.
//     So a run's memory never counts against the node-agent's bound, and a
//     container memory limit on <own> would bound both together.
//
// It returns opts with the runs' parent fixed (later runs never read the
// process's own cgroup again) and where everything went. Memory the process
// used before the move stays charged to <own> (cgroup v1 does not move
// charges): call it first. Linux only; elsewhere it changes nothing.
func PlaceNodeAgent(opts Options, memoryLimit int64) (Options, Placement, error) {
	if memoryLimit < 0 {
		return opts, Placement{}, fmt.Errorf("sandbox: a negative memory limit (%d) for the node-agent", memoryLimit)
	}
	return placeNodeAgent(opts, memoryLimit)
}

// Availability is the preflight verdict for one mode.
type Availability struct {
	Mode      Mode
	Available bool
	// Reason says, in words an operator can act on, why the mode is not
	// available (or a note when it is).
	Reason string
}

// Preflight runs a trivial command with the production flags in every mode
// this OS knows and reports which work on this host and, if not, why.
func Preflight(ctx context.Context, opts Options) []Availability {
	return preflight(ctx, opts)
}

// NoCPUShare is in a sandbox mode's preflight verdict when runs there have
// no CPU share of their own: their processes compete one by one with the
// node-agent's and every other run's.
const NoCPUShare = "WITHOUT a CPU share per run"

// NoSocketBound is in a sandbox mode's preflight verdict when a run's TCP
// socket buffers are outside its memory limit: cgroup v1 on a kernel
// without TCP accounting for memory cgroups.
const NoSocketBound = "WITHOUT its TCP socket buffers in the memory limit"

// NoFileTableBound is in a sandbox mode's preflight verdict when one run's
// memory limit could hold more open files than the node's open-file table
// (fs.file-max) allows: filled, it refuses every unprivileged process of
// the node a file.
const NoFileTableBound = "WITHOUT the node's open-file table out of one run's reach"

// Degraded says whether an available mode's preflight verdict names a
// bound its runs go without (NoCPUShare, NoSocketBound, NoFileTableBound):
// said loudly wherever the verdict is read.
func Degraded(verdict string) bool {
	return strings.Contains(verdict, NoCPUShare) || strings.Contains(verdict, NoSocketBound) || strings.Contains(verdict, NoFileTableBound)
}

// RootError is a Spec.Root the sandbox refuses to mount in: its links
// would move a mount onto, into or over another one, or over the whole
// root. It is the root's fault (an environment image's, or what a command
// before left in its overlay), not the node's.
type RootError struct{ msg string }

func (e *RootError) Error() string { return e.msg }

// ErrNoSandbox is returned by New when the policy is Required and no sandbox
// mode works on this host.
var ErrNoSandbox = errors.New("sandbox: no sandbox mode works on this host")

// PlainWarning is the Result.Warning of every plain run.
const PlainWarning = "the agent ran UNSANDBOXED as a plain child process: it could read the node's files " +
	"that its user may read and reach the network; only its environment was restricted"

// New picks the runner for policy: the host's sandbox mode if its preflight
// passes; otherwise an error wrapping ErrNoSandbox under PolicyRequired, or a
// plain runner (whose every Result carries PlainWarning and the reason the
// sandbox was unavailable) under PolicyAllowFallback. It also returns the
// preflight verdicts so the caller can publish them.
func New(ctx context.Context, policy Policy, opts Options) (Runner, []Availability, error) {
	avail := Preflight(ctx, opts)
	return choose(policy, opts, avail)
}

// Choose is New with the verdicts of a Preflight the caller already ran
// with opts: a caller that needs the runner of more than one policy (the
// executor needs both) pays for one preflight, which starts a sandbox,
// not one per policy.
func Choose(policy Policy, opts Options, avail []Availability) (Runner, error) {
	r, _, err := choose(policy, opts, avail)
	return r, err
}

func choose(policy Policy, opts Options, avail []Availability) (Runner, []Availability, error) {
	var reasons []string
	for _, a := range avail {
		if a.Mode == ModePlain {
			continue
		}
		if a.Available {
			r, err := newSandboxRunner(a.Mode, opts)
			return r, avail, err
		}
		reasons = append(reasons, fmt.Sprintf("%s: %s", a.Mode, a.Reason))
	}
	why := strings.Join(reasons, "; ")
	if why == "" {
		why = "this OS has no sandbox mode"
	}
	switch policy {
	case PolicyAllowFallback:
		return &PlainRunner{Reason: why}, avail, nil
	case PolicyRequired, "":
		return nil, avail, fmt.Errorf("%w (%s)", ErrNoSandbox, why)
	}
	return nil, avail, fmt.Errorf("sandbox: unknown policy %q", policy)
}

// errRootNeedsBwrap is what runners other than bwrap say to a Spec.Root.
var errRootNeedsBwrap = errors.New("sandbox: an environment image as the root needs the bwrap sandbox; this runner cannot change the root")

func isAbs(p string) bool {
	if p == "" {
		return false
	}
	if p[0] == '/' || p[0] == '\\' {
		return true
	}
	// Windows drive paths (C:\...). Kept here so validation is the same on
	// every OS the tests run on.
	return len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/')
}
