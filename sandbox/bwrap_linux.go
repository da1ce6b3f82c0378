package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// BwrapRunner runs commands under bubblewrap in a per-run cgroup.
type BwrapRunner struct {
	bwrap string
	opts  Options
	// noSeccomp runs without the seccomp filter: only tests and the
	// benchmark set it, to show what the filter changes.
	noSeccomp bool
	// userNetns: the caller may not make a network namespace (it is not
	// root), so bwrap makes the sandbox's own, in the user namespace it
	// makes; nothing of the caller's can listen there (ServesLoopback).
	userNetns bool
}

var _ Runner = (*BwrapRunner)(nil)

// NewBwrapRunner returns a runner for the bwrap binary of opts (or the one in
// PATH). It does not check that bwrap works here; Preflight does.
func NewBwrapRunner(opts Options) (*BwrapRunner, error) {
	if inheritedErr != nil {
		return nil, fmt.Errorf("sandbox: cannot keep the descriptors this process inherited out of sandboxes: %w", inheritedErr)
	}
	if err := noCoreDumps(); err != nil {
		return nil, err
	}
	path := opts.Bwrap
	if path == "" {
		path = "bwrap"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return nil, fmt.Errorf("sandbox: bwrap not found (%w): install Debian's bubblewrap package (apt-get install bubblewrap)", err)
	}
	// Making a network namespace takes CAP_SYS_ADMIN, and entering one
	// takes it in this process's user namespace too (netns_install): a
	// caller that is not root can do neither, from a process with threads.
	return &BwrapRunner{bwrap: p, opts: opts, userNetns: os.Geteuid() != 0}, nil
}

// noCoreDumps sets this process's core limit, soft and hard, to 1 byte,
// which every sandbox and slirp4netns it starts inherits. Not 0:
// the kernel ignores a limit of 0 when core_pattern is a pipe and starts
// the helper all the same (core(5)); 1 is its way to say "no core, not
// even to a pipe", and a file of 1 byte is below any core the kernel
// writes. A crash dumps
// core through kernel.core_pattern, which is the node's: a pipe there
// (systemd-coredump, apport, a crash collector) starts a helper as root in
// the node's own namespaces and outside the run's cgroup, which keeps the
// core on the node's disk; a plain pattern writes into the crashing
// process's folder. Without this an agent raised its soft limit to the hard
// one it inherited (unlimited) and could crash as often as it liked. Only
// CAP_SYS_RESOURCE in the node's user namespace raises a hard limit again,
// which nothing in a sandbox has. The runner's own process loses its cores
// too: a core of it would hold the runs' credentials.
func noCoreDumps() error {
	if err := unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{Cur: 1, Max: 1}); err != nil {
		return fmt.Errorf("sandbox: cannot turn core dumps off for sandboxes: %w", err)
	}
	return nil
}

// Mode returns ModeBwrap.
func (*BwrapRunner) Mode() Mode { return ModeBwrap }

func (r *BwrapRunner) servesLoopback() bool { return !r.userNetns }

// File descriptors of the bwrap child (ExtraFiles start at 3).
const (
	fdArgs    = 3
	fdSeccomp = 4
	fdResolv  = 5
)

// bwrapArgs are the options passed through --args: nothing here appears on a
// command line, so environment values (credentials) stay out of the
// world-readable /proc/<pid>/cmdline. seccomp loads the filter from
// fdSeccomp. A NetworkUserMode run gets its /etc/resolv.conf from fdResolv.
func bwrapArgs(spec Spec, seccomp bool) []string {
	a := []string{
		"--unshare-all", // user, ipc, pid, net, uts, cgroup namespaces
		"--unshare-user",
		"--disable-userns", // no nested user namespace: no unshare/mount inside
		"--die-with-parent",
		"--new-session", // setsid: no controlling terminal, so no TIOCSTI
		"--cap-drop", "ALL",
		// The UTS namespace would keep the host's name (the node's, or the
		// node-agent pod's): the agent learns nothing of where it runs.
		// localhost, since every /etc/hosts resolves it: a tool that looks
		// its own name up (git's default identity) waits on no DNS.
		"--hostname", SandboxHostname,
	}
	if spec.Root != "" {
		// An image's overlay: none of the host's root, so none of its
		// sockets or secrets to mask; root inside, the run's uid outside.
		a = append(a, "--uid", "0", "--gid", "0", "--bind", spec.Root, "/")
	} else {
		a = append(a, "--ro-bind", "/", "/")
	}
	// In a Root, each mount lands where the root's links lead its path
	// (rootTargets); on the node's root, where the path says.
	at := func(p string) string {
		if spec.rootDests == nil {
			return p
		}
		if d, ok := spec.rootDests[filepath.Clean(p)]; ok {
			return d
		}
		return p
	}
	if spec.devDir != "" {
		// The runner's /dev for this sandbox, with its devices
		// (devInstance): --dev-bind keeps them openable.
		a = append(a, "--dev-bind", spec.devDir, at("/dev"))
	} else {
		a = append(a, "--dev", at("/dev"))
	}
	a = append(a,
		"--proc", at("/proc"),
		"--tmpfs", at("/tmp"),
	)
	if spec.ptsDir != "" {
		// A bounded devpts over --dev's: /dev/ptmx (pts/ptmx) is its.
		a = append(a, "--dev-bind", spec.ptsDir, filepath.Join(at("/dev"), "pts"))
	}
	if spec.Root == "" {
		// Masks go before the binds, so that a run dir inside a hidden
		// directory (the node-agent's state) is still bound; a hidden path
		// inside a bound one is masked again after the binds, or the bind
		// would uncover it. The host's socket directories come first: the
		// read-only root does not stop connect(), so every daemon socket
		// must be out of sight.
		a = append(a, maskedMounts()...)
		a = append(a, hiddenMounts(outside(outermost(spec.Hidden), slices.Concat(SocketDirs, NodeDirs)), at)...)
		// The host's /etc/hostname names the node (or the node-agent's
		// pod): the sandbox reads its own name there, as uname says it,
		// from its own UTS namespace's proc file.
		if etc, err := filepath.EvalSymlinks("/etc/hostname"); err == nil {
			a = append(a, "--ro-bind", "/proc/sys/kernel/hostname", etc)
		}
	}
	for _, p := range spec.ReadOnly {
		a = append(a, "--ro-bind-try", p, at(p))
	}
	for _, p := range spec.ReadWrite {
		a = append(a, "--bind", p, at(p))
	}
	for _, b := range spec.BindAt {
		a = append(a, "--bind", b.Source, at(b.Target))
	}
	// A hidden path inside a bound one is masked again, and then a bind
	// inside a path masked again is bound again over the mask (the run
	// dir inside the run root, when a read-only bind holds both: a CLI's
	// install prefix above the run root), and so on down.
	masked := innerHidden(spec, nil)
	for range len(spec.Hidden) + 1 {
		if len(masked) == 0 {
			break
		}
		a = append(a, hiddenMounts(masked, at)...)
		var rebound []string
		for _, p := range spec.ReadOnly {
			if insideAny(p, masked) {
				a = append(a, "--ro-bind-try", p, at(p))
				rebound = append(rebound, p)
			}
		}
		for _, p := range spec.ReadWrite {
			if insideAny(p, masked) {
				a = append(a, "--bind", p, at(p))
				rebound = append(rebound, p)
			}
		}
		for _, b := range spec.BindAt {
			if insideAny(b.Target, masked) {
				a = append(a, "--bind", b.Source, at(b.Target))
			}
		}
		if len(rebound) == 0 {
			break
		}
		masked = innerHidden(spec, rebound)
	}
	a = append(a, "--clearenv")
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	if spec.Network == NetworkShared || spec.netns != nil {
		// The caller's network, or the one the runner made (newNetns),
		// which bwrap is started in.
		a = append(a, "--share-net")
	}
	if spec.Network == NetworkUserMode {
		resolv := resolvConfPath()
		if spec.Root != "" {
			resolv = "/etc/resolv.conf" // the image's, whatever the host's is
		}
		a = append(a, "--ro-bind-data", fmt.Sprint(fdResolv), at(resolv))
	}
	a = append(a, "--chdir", spec.Dir)
	if seccomp {
		a = append(a, "--seccomp", fmt.Sprint(fdSeccomp))
	}
	return a
}

// SocketDirs are the host directories where Linux daemons keep their unix
// sockets. A read-only bind does not stop connect(), so each of them that
// exists is covered by an empty tmpfs in every sandbox, whatever the Spec
// says; a run's own sockets reach it through the paths the Spec binds
// after them. The list follows what flatpak leaves out of its sandboxes
// (the host's /run and /tmp) and adds the places below /var and /mnt where
// common daemons listen:
//
//   - /run and /var/run: D-Bus, journald (/run/systemd/journal), udev,
//     containerd, CRI-O, Docker, Podman, libvirt, snapd, nscd, user
//     sessions (/run/user/UID: the session bus, PipeWire, Wayland, gpg-agent);
//   - /tmp: X11 (/tmp/.X11-unix), ICE, ssh-agent, tmux (already a tmpfs);
//   - /var/lib/kubelet: device-plugin, pod-resources and plugin-registration
//     sockets;
//   - /var/snap: LXD's and MicroK8s' sockets (/var/snap/*/common/…);
//   - /var/lib/lxd and /var/lib/incus: LXD's and Incus' unix.socket;
//   - /var/lib/sss/pipes: SSSD; /var/spool/postfix: Postfix's sockets;
//   - /var/lib/mysql: mysql.sock on Red Hat-style hosts;
//   - /mnt/wslg: WSLg's X11, Wayland and PulseAudio sockets.
//
// Abstract sockets have no path: they belong to a network namespace, and
// every sandbox has its own.
var SocketDirs = []string{
	"/run", "/var/run", "/tmp", "/var/lib/kubelet", "/var/snap", "/var/lib/lxd",
	"/var/lib/incus", "/var/lib/sss/pipes", "/var/spool/postfix", "/var/lib/mysql", "/mnt/wslg",
}

// NodeDirs are host directories that describe the node's other workloads,
// covered by an empty tmpfs in every sandbox like SocketDirs, whatever the
// Spec says. /sys/fs/cgroup holds every cgroup of the node, readable by
// anyone: on a Kubernetes node the kubelet's pods by UID and their
// containers by ID, with their memory, CPU and process counts, and the
// node-agent's other runs, theirs. /sys/class/net and the interfaces' own
// folders (/sys/devices/virtual/net, every pod's veth and the node's
// bridges, and each physical interface's, nodeNetDirs) name the node's
// interfaces with their hardware addresses and live traffic counters: the
// other workloads' traffic, to watch or to signal through. The sandbox's
// network namespace has none of them (sysfs is the host's, bound
// read-only), and tools list interfaces through netlink, not sysfs.
// /sys/devices/virtual/dmi names the machine (its vendor and model, the
// cloud's instance type). Nothing inside needs any of it: a run's limits
// are applied, and its figures read, from outside its sandbox. A sandbox
// on an environment image has no host /sys at all.
var NodeDirs = []string{"/sys/fs/cgroup", "/sys/class/net", "/sys/devices/virtual/net", "/sys/devices/virtual/dmi"}

// nodeNetDirs are the folders below /sys/devices that hold the host's
// network interfaces outside /sys/devices/virtual/net: the net folder of
// each physical device a /sys/class/net link points into. Read at each
// sandbox's start, since interfaces come and go. Each link is read once and
// its target found lexically: sysfs's links are relative, and neither
// /sys/class/net nor the device folders below /sys/devices are links
// themselves, so that is the real path (EvalSymlinks took an lstat for
// every folder on the way, a dozen per interface, at every start).
func nodeNetDirs() []string {
	const class = "/sys/class/net"
	entries, _ := os.ReadDir(class)
	var dirs []string
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(class, e.Name()))
		if err != nil {
			continue
		}
		dev := link
		if !filepath.IsAbs(dev) {
			dev = filepath.Join(class, link)
		}
		if within(dev, "/sys/devices") && !within(dev, "/sys/devices/virtual/net") {
			dirs = append(dirs, filepath.Dir(dev))
		}
	}
	return dirs
}

// SandboxHostname is the name every sandbox has (uname, hostname).
const SandboxHostname = "localhost"

// maskedMounts covers each existing socket directory and node directory
// with an empty tmpfs, at its real path (/var/run is usually a link to
// /run: one mount serves both), once. /tmp has its own tmpfs already. A
// node directory's tmpfs is made read-only, as /sys around it is: a write
// there would only land in the sandbox's own memory, but nothing has a
// reason to write below /sys, and every write outside the run dir is
// refused (TestBwrapWritesOutsideRunDirRefused).
func maskedMounts() []string {
	var a []string
	seen := map[string]bool{"/tmp": true}
	mask := func(d string, readOnly, isReal bool) {
		// Most of the list is missing on a given host: one stat says so.
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return
		}
		resolved := d
		if !isReal {
			var err error
			if resolved, err = filepath.EvalSymlinks(d); err != nil {
				return
			}
		}
		if seen[resolved] {
			return
		}
		seen[resolved] = true
		a = append(a, "--tmpfs", resolved)
		if readOnly {
			a = append(a, "--remount-ro", resolved)
		}
	}
	for _, d := range SocketDirs {
		mask(d, false, false)
	}
	for _, d := range NodeDirs {
		mask(d, true, false)
	}
	for _, d := range nodeNetDirs() {
		mask(d, true, true)
	}
	return a
}

// outside drops the paths that lie within one of dirs: they are already
// covered.
func outside(paths, dirs []string) []string {
	var out []string
	for _, p := range paths {
		covered := false
		for _, d := range dirs {
			if within(p, d) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

// outermost drops the hidden paths that lie inside another hidden
// directory: its empty tmpfs covers them already, and masking them again
// made bwrap create their mount points in it, so the masked directory
// showed their names (an empty /root/.config/harnessfacts/keys in a local
// run's masked /root) and cost a mount. A bind that uncovers one of them
// masks it again after the binds (bwrapArgs' inner). A path given twice
// (a local run's home that is also a node-wide hidden folder) is masked
// once.
func outermost(paths []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range paths {
		if seen[filepath.Clean(p)] {
			continue
		}
		seen[filepath.Clean(p)] = true
		covered := false
		for _, d := range paths {
			if filepath.Clean(d) != filepath.Clean(p) && within(p, d) && isDir(d) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	return out
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// hiddenFor is what of hidden the sandbox of uid/gid must mask: each path
// where its links lead (bwrap makes a mount point where a path names it,
// and a link's path in the new root leads nowhere: "Can't mount tmpfs on
// /newroot/<link>"), and none that uid cannot reach anyway: a folder below
// one it may not search (a fixtures folder made private with chmod o-rwx,
// as the local run advises) is out of its sight already, and bwrap, as
// uid, could not make a mount point there. Only mode bits are judged, as
// the kernel does for a process without supplementary groups (the
// sandbox's); a folder with an ACL is taken as searchable.
func hiddenFor(hidden []string, uid, gid int) []string {
	out := make([]string, 0, len(hidden))
	for _, h := range hidden {
		if r, err := filepath.EvalSymlinks(h); err == nil {
			h = r
		}
		if os.Geteuid() == 0 && uid != 0 && !searchable(filepath.Dir(h), uid, gid) {
			continue
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// searchable reports whether uid/gid (no other groups) may search dir and
// every folder above it, by their mode bits; a folder with an ACL counts
// as searchable, and so does one that cannot be read.
func searchable(dir string, uid, gid int) bool {
	for ; ; dir = filepath.Dir(dir) {
		var st unix.Stat_t
		if unix.Stat(dir, &st) != nil {
			return true
		}
		bit := uint32(0o001)
		switch {
		case int(st.Uid) == uid:
			bit = 0o100
		case int(st.Gid) == gid:
			bit = 0o010
		}
		if st.Mode&bit == 0 {
			if _, err := unix.Getxattr(dir, "system.posix_acl_access", nil); !errors.Is(err, unix.ENODATA) {
				return true
			}
			return false
		}
		if dir == "/" || dir == "." {
			return true
		}
	}
}

// hiddenMounts masks each existing directory with an empty tmpfs and each
// existing file with /dev/null. A missing path has nothing to hide, and bwrap
// could not make a mount point for it in the read-only root.
func hiddenMounts(paths []string, at func(string) string) []string {
	var a []string
	for _, h := range paths {
		fi, err := os.Stat(h)
		switch {
		case err != nil:
			continue
		case fi.IsDir():
			a = append(a, "--tmpfs", at(h))
		default:
			a = append(a, "--ro-bind", "/dev/null", at(h))
		}
	}
	return a
}

// innerHidden are the hidden paths inside a bound one (of binds; nil: all
// of spec's), masked again after the binds, which would uncover them.
func innerHidden(spec Spec, binds []string) []string {
	if binds == nil {
		binds = slices.Concat(spec.ReadOnly, spec.ReadWrite)
	}
	var inner []string
	for _, h := range spec.Hidden {
		for _, b := range binds {
			if within(h, b) {
				inner = append(inner, h)
				break
			}
		}
	}
	return inner
}

// insideAny reports whether p is below one of dirs (not one of them).
func insideAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p != d && within(p, d) {
			return true
		}
	}
	return false
}

// within reports whether p is parent or below it.
func within(p, parent string) bool {
	rel, err := filepath.Rel(parent, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// argsFile returns a sealed memfd holding args NUL-separated, for --args.
// A memfd has no size limit (a pipe would need a writer goroutine past 64
// KiB of environment) and is never on disk. An argument holding a NUL
// would become two, the second an option of its own: refused (Spec.validate
// refuses it first; this is the last guard).
func argsFile(args []string) (*os.File, error) {
	var buf bytes.Buffer
	for i, s := range args {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("bwrap argument %d holds a NUL byte", i)
		}
		buf.WriteString(s)
		buf.WriteByte(0)
	}
	return sealedMemfd("bwrap-args", buf.Bytes())
}

// sealedMemfd returns a memfd holding data, read from its start, that no one
// can change any more.
func sealedMemfd(name string, data []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	_, _ = unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL)
	return f, nil
}

// setupTries bounds how often Run starts bwrap when it dies in its own
// setup, before the payload could run.
const setupTries = 3

// Run runs spec under bubblewrap. See Runner.
//
// bwrap binds the host's / recursively and then remounts each mount below
// it read-only; a mount that goes away meanwhile (another run's run dir, a
// pod volume the kubelet removes, anything on the host) makes it fail with
// "Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags:
// remount ...", before the payload ran (bubblewrap issue 650, open). Run
// then starts it again, up to setupTries in all, and says so on the
// payload's stderr; only a failure it can prove came before the payload
// is retried (bwrapSetupFailed), so a payload cannot have itself run twice.
func (r *BwrapRunner) Run(ctx context.Context, spec Spec) (res Result, err error) {
	// Stdin must be given whole to the next start: the copy into the
	// failed one's pipe may have taken some of it.
	rewind := func() bool { return true }
	switch in := spec.Stdin.(type) {
	case nil, *os.File: // bwrap itself reads nothing of it
	case io.Seeker:
		pos, err := in.Seek(0, io.SeekCurrent)
		rewind = func() bool {
			if err != nil {
				return false
			}
			_, err := in.Seek(pos, io.SeekStart)
			return err == nil
		}
	default:
		rewind = func() bool { return false }
	}
	var once sync.Once
	started := spec.Started
	spec.Started = func() { once.Do(func() { Spec{Started: started}.started() }) }
	for try := 1; ; try++ {
		var setupFailed bool
		res, err = r.run(ctx, spec, &setupFailed)
		spec.Prepared = nil // taken, or not made for this spec
		res.SetupRetries = try - 1
		if setupFailed && err == nil && (try == setupTries || !rewind()) {
			// Not the command's exit 1: the sandbox never ran it. The
			// run is the sandbox's failure, not the agent's or a check's.
			return res, fmt.Errorf("%w: bwrap's setup failed before the command ran, %d times (its message is in the command's output)", ErrSetupFailed, try)
		}
		if !setupFailed || ctx.Err() != nil {
			return res, err
		}
		if spec.Stderr != nil {
			fmt.Fprintf(spec.Stderr, "harnessfacts: the sandbox's setup failed before the command ran (bwrap's message is above; a host mount that changes under bwrap does this, bubblewrap issue 650): starting the sandbox again (%d of %d)\n", try+1, setupTries)
		}
	}
}

// ErrSetupFailed marks a sandbox whose bwrap failed in its setup, before
// the command ran, on every try.
var ErrSetupFailed = errors.New("sandbox: setup failed")

// execFailure watches the start of the command's error output for bwrap's
// words when it could not execute the command (its execvp failed: the
// command is missing, a folder, not executable), which bwrap reports as
// exit 1, like any command's failure. The shells' codes say it apart:
// 127 for a command not found, 126 for one found that could not be
// executed. Only where the runner sees that output (a writer that is not
// a file), and only when nothing else was written.
type execFailure struct {
	mu    sync.Mutex
	w     io.Writer
	want  string // "bwrap: execvp ARGV0: "
	first []byte // the output's first bytes, up to len(want)+64
	n     int    // how many bytes were written
}

func watchExecFailure(cmd *exec.Cmd, argv0 string) *execFailure {
	if _, isFile := cmd.Stderr.(*os.File); cmd.Stderr == nil || isFile {
		return nil
	}
	f := &execFailure{w: cmd.Stderr, want: "bwrap: execvp " + argv0 + ": "}
	if sameWriter(cmd.Stdout, cmd.Stderr) {
		// One writer for both stays one (os/exec then makes one pipe, and
		// the two streams keep their order).
		cmd.Stdout = f
	}
	cmd.Stderr = f
	return f
}

// sameWriter is a == b, false where they cannot be compared (as os/exec
// judges them).
func sameWriter(a, b io.Writer) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

func (f *execFailure) Write(p []byte) (int, error) {
	f.mu.Lock()
	if k := len(f.want) + 64 - len(f.first); k > 0 {
		f.first = append(f.first, p[:min(k, len(p))]...)
	}
	f.n += len(p)
	f.mu.Unlock()
	return f.w.Write(p)
}

// code is 127 or 126 when bwrap, past its setup (it read the seccomp
// program, which it does just before it executes the command), exited 1
// having written only its execvp failure.
func (f *execFailure) code(res Result, seccomp *os.File) (int, bool) {
	if f == nil || res.ExitCode != 1 || res.Signal != 0 || res.TimedOut || res.OOMKilled {
		return 0, false
	}
	if seccomp != nil {
		if off, err := unix.Seek(int(seccomp.Fd()), 0, io.SeekCurrent); err != nil || off == 0 {
			return 0, false
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	line, rest, ok := strings.Cut(string(f.first), "\n")
	reason, found := strings.CutPrefix(line, f.want)
	if !ok || rest != "" || !found || f.n != len(line)+1 {
		return 0, false
	}
	switch reason {
	case "No such file or directory", "Not a directory":
		return 127, true
	}
	return 126, true
}

// bwrapSetupFailed says whether bwrap, now gone, died in its own setup:
// it exited 1 (its die()) and never read the seccomp program, which it
// reads after every mount and just before it forks and executes the
// payload. The memfd's offset is shared with bwrap's copy of it; bwrap
// closes that copy once read, so the payload can never move it.
func bwrapSetupFailed(res Result, seccomp *os.File) bool {
	if seccomp == nil || res.ExitCode != 1 || res.Signal != 0 || res.TimedOut || res.OOMKilled {
		return false
	}
	off, err := unix.Seek(int(seccomp.Fd()), 0, io.SeekCurrent)
	return err == nil && off == 0
}

func (r *BwrapRunner) run(ctx context.Context, spec Spec, setupFailed *bool) (res Result, err error) {
	res = Result{Mode: ModeBwrap, ExitCode: -1}
	if err := spec.validate(); err != nil {
		return res, err
	}
	limits := spec.Limits.WithDefaults()
	if err := canRunAs(spec.UID, spec.GID); err != nil {
		return res, err
	}
	uid, gid := spec.ids()
	spec.Hidden = hiddenFor(spec.Hidden, uid, gid)
	cred := runAs(uid, gid)
	if cred == nil && os.Getuid() == 0 {
		return res, errors.New("sandbox: refusing to run bwrap as host root")
	}
	reach := append(append([]string{spec.Dir}, spec.ReadWrite...), spec.ReadOnly...)
	if spec.Root != "" {
		reach = append(reach, spec.Root)
	}
	for _, p := range reach {
		if err := Reachable(p, uid, gid); err != nil {
			return res, err
		}
	}
	if err := prepareWritable(spec.ReadWrite, uid, gid); err != nil {
		return res, err
	}

	// Refused before anything is made: an unprivileged caller makes no
	// network namespace of its own.
	if r.userNetns && spec.Network != NetworkShared {
		switch {
		case spec.Network == NetworkUserMode:
			return res, fmt.Errorf("sandbox: a user-mode network needs the caller to be root (uid %d makes no network namespace of its own, and slirp4netns opens /dev/net/tun)", os.Geteuid())
		case len(spec.Loopback) > 0:
			return res, fmt.Errorf("sandbox: uid %d cannot listen in a sandbox's network namespace (only root makes or enters one): bridge its loopback inside (harnessfacts sandbox-init)", os.Geteuid())
		}
	}
	// Its cgroup and network namespace, made ahead (Prepare) for this
	// spec or now, and its /dev (partsFor says how).
	lim, key := r.partsFor(spec)
	ownNetns := key.ownNetns
	var parts sandboxParts
	if p := spec.Prepared.take(key); p != nil {
		parts = *p
	}
	if err := parts.make(r.opts, lim, ownNetns, spec.Loopback, true, spec.DevIn, uid, gid); err != nil {
		return res, err
	}
	cg, dev := parts.cg, parts.dev
	res.cgroup = cgroupDescription(cg)
	defer func() {
		if rerr := cg.remove(); rerr != nil && err == nil {
			err = fmt.Errorf("sandbox: %w", rerr)
		}
	}()
	if dev != nil {
		res.ptysBounded = true
		if dev.ptsOnly {
			spec.ptsDir = dev.dir
		} else {
			spec.devDir, res.ownDev = dev.dir, true
		}
		defer func() {
			if rerr := dev.remove(); rerr != nil && err == nil {
				err = fmt.Errorf("sandbox: %w", rerr)
			}
		}()
	}
	var srv *serving
	defer func() { srv.stop() }()
	switch {
	case ownNetns:
		defer parts.ns.Close()
		spec.netns = parts.ns
		srv = serve(spec.Loopback, parts.ls)
	case spec.Network == NetworkShared && len(spec.Loopback) > 0:
		ls, err := listenShared(spec.Loopback)
		if err != nil {
			return res, err
		}
		srv = serve(spec.Loopback, ls)
	}
	// A user-mode network stack is attached to that namespace before
	// bwrap starts in it, so the command starts with its network up.
	var resolv *os.File
	if spec.Network == NetworkUserMode {
		slirp, err := slirpPath(r.opts)
		if err != nil {
			return res, err
		}
		if resolv, err = sealedMemfd("resolv.conf", []byte("nameserver "+slirpDNS+"\n")); err != nil {
			return res, fmt.Errorf("sandbox: resolv.conf: %w", err)
		}
		defer resolv.Close()
		stack, err := startSlirp(slirp, spec.netns)
		if err != nil {
			return res, fmt.Errorf("sandbox: %w", err)
		}
		defer stack.stop()
		// slirp4netns holds a host socket, with its buffers, for every
		// connection the agent opens: outside the run's cgroup 400
		// connections the agent never read from held 434 MiB of receive
		// queues and 95 MiB of slirp4netns under a 32 MiB limit. In it,
		// they are the run's (and killAll ends it with the run).
		if err := cg.adopt(stack.cmd.Process.Pid); err != nil {
			return res, errors.Join(fmt.Errorf("sandbox: %w", err), cg.killAll())
		}
		// The node's cloud metadata service is never the run's to reach
		// (UserModeUnreachable).
		if err := blackholeMetadata(spec.netns, spec.Unreachable); err != nil {
			return res, errors.Join(fmt.Errorf("sandbox: %w", err), cg.killAll())
		}
	}

	var sf *os.File // nil: fd 4 is closed in the child
	if !r.noSeccomp {
		var prof SeccompProfile
		if sf, prof, err = seccompFile(); err != nil {
			return res, fmt.Errorf("sandbox: %w", err)
		}
		defer sf.Close()
		res.Seccomp = prof.String()
	}
	if spec.Root != "" {
		if spec.rootDests, err = rootTargets(spec.Root, rootMounts(spec)); err != nil {
			return res, err
		}
	}
	af, err := argsFile(bwrapArgs(spec, sf != nil))
	if err != nil {
		return res, fmt.Errorf("sandbox: bwrap args: %w", err)
	}
	defer af.Close()
	extra := []*os.File{af, sf}
	if resolv != nil {
		extra = append(extra, resolv) // fdResolv
	}
	argv := spec.Argv

	bwrapArgv := append([]string{"bwrap", "--args", fmt.Sprint(fdArgs), "--"}, argv...)
	// bwrap's own environment is empty: it would otherwise be readable in
	// the sandbox as /proc/1/environ (bwrap's init keeps its exec-time env).
	cmd := exec.Command(r.bwrap, bwrapArgv[1:]...)
	cmd.Args[0] = bwrapArgv[0]
	cmd.Env = []string{}
	cmd.Dir = "/"
	cmd.Stdin, cmd.Stdout, cmd.Stderr = spec.Stdin, spec.Stdout, spec.Stderr
	execErr := watchExecFailure(cmd, spec.Argv[0])
	cmd.ExtraFiles = extra
	cmd.WaitDelay = 5 * time.Second
	// Setpgid keeps a terminal's job-control signals away from the tree;
	// Credential makes bwrap, and so the user namespace it creates and
	// everything in it, belong to an unprivileged host uid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}

	runCtx, cancel := withTimeout(ctx, limits.Timeout)
	defer cancel()
	start := time.Now()
	// Born in its cgroup: v2's clone3, or on v1 forked by a thread that
	// moved itself in (startOnForker).
	err = cg.start(cmd, spec.netns)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			// The sandbox's failure, never the command's.
			return res, fmt.Errorf("sandbox: start bwrap: uid %d may not run %s: %w", uid, r.bwrap, err)
		}
		return res, fmt.Errorf("sandbox: start bwrap: %w", err)
	}

	var killErr error
	spec.started()

	stop := watch(runCtx, func() {
		killErr = cg.killAll()
		_ = cmd.Process.Kill() // the outer bwrap, outside the cgroup on v1
	})
	// On v1 the memory limit does not bound socket buffers: the run is
	// killed when they and its memory pass it (v1Cgroup.watchSockets).
	var socketKillErr error
	stopSockets := cg.watchSockets(limits.MemoryBytes, func() {
		socketKillErr = cg.killAll()
		_ = cmd.Process.Kill()
	})
	waitErr := cmd.Wait()
	stop()
	socketCause, socketPeak := stopSockets()
	if killErr == nil {
		killErr = socketKillErr
	}
	if kerr := cg.killAll(); kerr != nil && killErr == nil {
		killErr = kerr
	}
	res.Duration = time.Since(start)
	res.OOMKilled, res.PeakMemory = cg.stats()
	if socketCause != "" {
		// Killed at the memory limit, as by the OOM killer, and said so.
		res.OOMKilled, res.OOMCause = true, socketCause
	}
	res.PeakMemory = max(res.PeakMemory, socketPeak)
	res.TimedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded)
	fillExit(&res, cmd.ProcessState)
	if res.Signal == 0 && res.ExitCode > 128 && res.ExitCode < 128+65 {
		// bwrap reports a payload killed by signal N as exit 128+N.
		res.Signal = res.ExitCode - 128
	}
	if code, ok := execErr.code(res, sf); ok {
		res.ExitCode = code
	}
	if waitErr != nil && cmd.ProcessState == nil {
		return res, fmt.Errorf("sandbox: wait for bwrap: %w", waitErr)
	}
	*setupFailed = killErr == nil && ctx.Err() == nil && bwrapSetupFailed(res, sf)
	if killErr != nil {
		return res, fmt.Errorf("sandbox: %w", killErr)
	}
	if ctx.Err() != nil && !res.TimedOut {
		return res, fmt.Errorf("sandbox: %w", ctx.Err())
	}
	return res, nil
}

// sandboxParts is what the runner makes for a sandbox before bwrap
// starts: its cgroup, its network namespace with the loopback listeners
// (when the runner makes one) and its /dev (nil where the caller may not
// mount).
type sandboxParts struct {
	cg  runCgroup
	ns  *os.File
	ls  []net.Listener
	dev *devInstance
}

// make makes at once the parts p lacks: its cgroup, its network namespace
// (ownNetns; with the listeners of lb) and, with dev, its /dev. Each is
// the kernel's work under locks of its own (the cgroup hierarchies', the
// network namespaces', the mount namespace's), and one after another they
// were about 1.8 of a check's 11 ms on cgroup v1, with bwrap's run 7 ms of
// the rest. On a failure every part of p is removed, and the error is the
// cgroup's, else the namespace's, else the /dev's.
func (p *sandboxParts) make(opts Options, lim Limits, ownNetns bool, lb []Loopback, dev bool, devIn string, uid, gid int) error {
	var (
		cgErr, nsErr, devErr error
		wg                   sync.WaitGroup
	)
	if p.cg == nil {
		wg.Go(func() { p.cg, cgErr = newRunCgroup(opts, lim) })
	}
	if ownNetns && p.ns == nil {
		wg.Go(func() { p.ns, p.ls, nsErr = newNetns(lb) })
	}
	if dev {
		p.dev, devErr = newDevInstance(devIn, uid, gid)
	}
	wg.Wait()
	if cgErr == nil && nsErr == nil && devErr == nil {
		return nil
	}
	_ = p.remove()
	*p = sandboxParts{}
	switch {
	case cgErr != nil:
		return fmt.Errorf("sandbox: %w", cgErr)
	case nsErr != nil:
		return nsErr // newNetns says "sandbox:"
	}
	return fmt.Errorf("sandbox: %w", devErr)
}

// remove removes the parts a Run did not take (Prepared.Close, a failed
// makeParts).
func (p *sandboxParts) remove() error {
	var errs []error
	if p.cg != nil {
		errs = append(errs, p.cg.remove())
	}
	closeAll(p.ls)
	if p.ns != nil {
		_ = p.ns.Close()
	}
	if p.dev != nil {
		errs = append(errs, p.dev.remove())
	}
	return errors.Join(errs...)
}

// bwrapInitTasks is bwrap's pid 1 in the sandbox's pid namespace (no
// --as-pid-1: it stays to reap what the command leaves), in the run's
// cgroup for the whole run.
const bwrapInitTasks = 1

// bwrapOwnTasks is bwrap's own process, the parent of its pid 1, born in
// the run's cgroup.
const bwrapOwnTasks = 1

// slirpTasks is what slirp4netns (one thread) adds to a run's cgroup:
// it comes on top, so that the command still gets MaxProcesses.
func slirpTasks(spec Spec) int64 {
	if spec.Network == NetworkUserMode {
		return 1
	}
	return 0
}

func newSandboxRunner(mode Mode, opts Options) (Runner, error) {
	if mode != ModeBwrap {
		return nil, fmt.Errorf("sandbox: mode %s is not available on linux", mode)
	}
	return NewBwrapRunner(opts)
}

// preflight runs `true` under bwrap with the production flags and limits.
func preflight(ctx context.Context, opts Options) []Availability {
	return []Availability{preflightBwrap(ctx, opts), {Mode: ModePlain, Available: true, Reason: "always possible; not a sandbox"}}
}

func preflightBwrap(ctx context.Context, opts Options) Availability {
	a := Availability{Mode: ModeBwrap}
	r, err := NewBwrapRunner(opts)
	if err != nil {
		a.Reason = err.Error()
		return a
	}
	if why := userNamespaceProblem(); why != "" {
		a.Reason = why
		return a
	}
	// What a killed earlier process's preflight or sandbox left in the
	// temporary folder, mounts and all (tempowner_linux.go).
	sweepTemp()
	dir, err := ownedTempDir("", "harnessfacts-preflight-")
	if err != nil {
		a.Reason = fmt.Sprintf("cannot make a temporary run directory: %v", err)
		return a
	}
	defer os.RemoveAll(dir)
	var stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := r.Run(ctx, Spec{
		Argv:      []string{"true"},
		Dir:       dir,
		Env:       []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir},
		ReadWrite: []string{dir},
		Stderr:    &stderr,
	})
	switch {
	case err != nil:
		a.Reason = explainBwrapFailure(err.Error())
	case res.ExitCode != 0:
		a.Reason = explainBwrapFailure(fmt.Sprintf("bwrap exited %d: %s", res.ExitCode, strings.TrimSpace(stderr.String())))
	default:
		a.Available = true
		cgroup := res.cgroup
		if cgroup == "" {
			cgroup = "unavailable"
		}
		ptys := fmt.Sprintf("a /dev of its own with at most %d ptys per sandbox", MaxPtys)
		if res.ptysBounded && !res.ownDev {
			ptys = fmt.Sprintf("at most %d ptys per sandbox (a devpts over bwrap's --dev: no device node can be made here)", MaxPtys)
		}
		if !res.ptysBounded {
			// Not in capitals: only a caller that may not mount (a local
			// run as an ordinary user) goes without, on its own machine.
			ptys = "ptys bounded only by the node's kernel.pty.max (no CAP_SYS_ADMIN and CAP_MKNOD to make a /dev per sandbox)"
		}
		a.Reason = fmt.Sprintf("bwrap %s, cgroup %s, seccomp %s, %s, %s", r.bwrap, cgroup, res.Seccomp, ptys, userNetDescription(opts))
		if files := fileTableDescription(); files != "" {
			a.Reason += ", " + files
		}
	}
	return a
}

// userNetDescription says whether NetworkUserMode runs (egress
// Unrestricted) can have their network here.
func userNetDescription(opts Options) string {
	p, err := slirpPath(opts)
	if err != nil {
		return "no user-mode network for egress Unrestricted (install Debian's slirp4netns package)"
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return "no user-mode network for egress Unrestricted (/dev/net/tun is missing: give the node-agent's container the device)"
	}
	return "user-mode network " + p
}

// cgroupDescription describes the cgroup a run had, for the preflight's
// verdict: the preflight's own run's (it used to make a second cgroup only
// to describe it, a few milliseconds before every local run's first
// sandbox).
func cgroupDescription(cg runCgroup) string {
	ctrl := cg.controllers()
	d := fmt.Sprintf("v%d (%s)", cg.version(), strings.Join(ctrl, ", "))
	if !slices.Contains(ctrl, "cpu") {
		// Loud: without it a run's processes compete for the CPU one by
		// one with the node-agent's and every other run's.
		d += " " + NoCPUShare + " (no writable cpu controller here): a run with many busy processes can starve the node-agent and the other runs"
	}
	if v1, ok := cg.(*v1Cgroup); ok && !v1.boundsSockets() {
		// Loud as well: the memory limit is then not the bound of what a
		// run holds (limitTCP).
		d += " " + NoSocketBound + " (this kernel has no " + tcpLimitFile + "): a run's TCP buffers, which every socket of the node shares, are bounded by nothing of the run's"
	}
	return d
}

// userNamespaceProblem checks the sysctls that commonly forbid the
// unprivileged user namespaces bwrap needs.
func userNamespaceProblem() string {
	if b, err := os.ReadFile("/proc/sys/kernel/unprivileged_userns_clone"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return "unprivileged user namespaces are disabled: sysctl -w kernel.unprivileged_userns_clone=1"
	}
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(b)) == "0" {
		return "user namespaces are disabled: sysctl -w user.max_user_namespaces=15000"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil && strings.TrimSpace(string(b)) == "1" {
		return "AppArmor restricts unprivileged user namespaces: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or give bwrap an AppArmor profile that allows userns"
	}
	return ""
}

func explainBwrapFailure(msg string) string {
	switch {
	case strings.Contains(msg, "No permissions to create a new namespace"),
		strings.Contains(msg, "Creating new namespace failed"):
		return "bwrap cannot create namespaces (unprivileged user namespaces disabled?): sysctl -w kernel.unprivileged_userns_clone=1 and user.max_user_namespaces>0; bwrap said: " + msg
	case strings.Contains(msg, "Unknown option"):
		return "bwrap is too old for the production flags (--disable-userns needs bubblewrap 0.8.0 or later): upgrade Debian's bubblewrap package; bwrap said: " + msg
	case strings.Contains(msg, "permission denied") && strings.Contains(msg, "cgroup"):
		return "cannot create a per-run cgroup: run the node-agent as root or delegate a cgroup subtree to it: " + msg
	}
	return msg
}
