package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// MaxPtys is how many pseudo-terminals one sandbox may hold at once.
//
// bwrap's --dev gives a sandbox a devpts instance of its own, with no
// bound of its own: every instance but the node's first draws on one
// count for the whole kernel, kernel.pty.max less kernel.pty.reserve
// (4096 − 1024 by default), which every other sandbox and every
// container of the node (each runtime gives its containers their own
// instance, and `kubectl exec -t` one of its ptys) shares. An agent under
// 256 MiB and 16 processes opened /dev/ptmx 3,071 times and held them
// for its whole episode: meanwhile no other sandbox or container of the
// node could open one (ENOSPC), and the run passed. A CLI takes one or a
// few at a time (a shell tool's terminal).
const MaxPtys = 64

// devNodes are the devices bwrap's --dev gives a sandbox, as the host's
// (major, minor). Each is as harmless as it is in the host's /dev, where
// everyone may read and write it.
var devNodes = []struct {
	name         string
	major, minor uint32
}{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

// devLinks are the links bwrap's --dev makes beside them.
var devLinks = [][2]string{
	{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
	{"stderr", "/proc/self/fd/2"}, {"core", "/proc/kcore"}, {"ptmx", "pts/ptmx"},
}

// devInstance is a sandbox's /dev, made by the runner before bwrap starts
// and given to it as one --dev-bind, in place of --dev: what --dev makes
// (a tmpfs of the sandbox's uid, the six devices, the links, shm, and a
// devpts instance at pts), with the devpts bounded at MaxPtys ptys.
//
// Two reasons. The bound: bwrap's devpts has none (MaxPtys). And the
// start: --dev is a tmpfs, six binds of the host's devices and a devpts,
// and bwrap reads the whole mount table at each bind; here the devices
// are made by mknod (the runner is root) in a tmpfs the runner mounts,
// and bwrap binds it once. With a devpts bound over bwrap's (the form
// before this one) a sandbox started later than with --dev alone; this
// starts sooner than --dev alone (docs/performance.md).
//
// The tmpfs has no nodev, or its devices would not open. What else could
// be a device there? The sandbox's processes own the tmpfs (as they own
// --dev's) but cannot make a device node: mknod of a device needs
// CAP_MKNOD in the host's user namespace, and a hard link cannot cross
// from another file system. It is nosuid like --dev's. The devices are
// root's, 0666: the sandbox may replace its own /dev/null with a file
// (as it may not under --dev, where it is a mount point), which fools
// only itself: every sandbox gets a /dev of its own.
//
// It needs CAP_SYS_ADMIN and CAP_MKNOD in the host's user namespace (the
// privileged node-agent, `harnessfacts run` as root). Where the runner may
// mount but not make devices (the node-agent in a pod's user namespace,
// where no device node can be made and a tmpfs is nodev anyway), the
// instance is a devpts alone (ptsOnly), bound over the pts of bwrap's
// --dev: the bound without the start's gain. A caller that may not mount
// gets nil, and its sandboxes keep bwrap's --dev with its unbounded
// devpts, as the preflight's verdict says.
//
// The tmpfs is made private at once, so that its unmount reaches no other
// mount namespace (a sandbox in its setup holds a copy of every mount);
// its mount point is made in Spec.DevIn, which the caller removes when no
// sandbox of its is starting, or, without one, in the system's temporary
// folder and removed by remove.
type devInstance struct {
	dir   string
	rmdir bool
	// ptsOnly: dir is a devpts for --dev's pts, not a /dev.
	ptsOnly bool
}

// mknodRefused is set once mknod was refused here: every later sandbox of
// the process gets a devpts alone, without trying.
var mknodRefused atomic.Bool

func newDevInstance(in string, uid, gid int) (*devInstance, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	dir, err := ownedTempDir(in, "harnessfacts-dev-")
	if err != nil {
		return nil, fmt.Errorf("a folder for the sandbox's /dev: %w", err)
	}
	d := &devInstance{dir: dir, rmdir: in == ""}
	if mknodRefused.Load() {
		return d.mountPtsOnly()
	}
	// bwrap's --dev tmpfs: mode 0755, the sandbox's uid (root inside a
	// Root's sandbox, which maps it to this uid).
	opts := fmt.Sprintf("mode=0755,uid=%d,gid=%d", uid, gid)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID, opts); err != nil {
		_ = os.Remove(dir)
		if errors.Is(err, unix.EPERM) {
			return nil, nil // no CAP_SYS_ADMIN here
		}
		return nil, fmt.Errorf("mounting the sandbox's /dev (tmpfs %s) on %s: %w", opts, dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_PRIVATE, ""); err != nil {
		_ = d.remove()
		return nil, fmt.Errorf("making the sandbox's /dev %s private: %w", dir, err)
	}
	if err := d.populate(uid, gid); err != nil {
		if errors.Is(err, errMknod) && errors.Is(err, unix.EPERM) {
			// No CAP_MKNOD in the host's user namespace.
			mknodRefused.Store(true)
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				_ = d.remove()
				return nil, fmt.Errorf("unmounting the sandbox's /dev %s: %w", dir, err)
			}
			return d.mountPtsOnly()
		}
		_ = d.remove()
		return nil, fmt.Errorf("the sandbox's /dev: %w", err)
	}
	return d, nil
}

// mountPtsOnly makes d a devpts alone, mounted on its folder.
func (d *devInstance) mountPtsOnly() (*devInstance, error) {
	d.ptsOnly = true
	if err := mountPts(d.dir); err != nil {
		_ = os.Remove(d.dir)
		if errors.Is(err, unix.EPERM) {
			return nil, nil // no CAP_SYS_ADMIN here
		}
		return nil, fmt.Errorf("the sandbox's devpts: %w", err)
	}
	if err := unix.Mount("", d.dir, "", unix.MS_PRIVATE, ""); err != nil {
		_ = d.remove()
		return nil, fmt.Errorf("making the sandbox's devpts %s private: %w", d.dir, err)
	}
	return d, nil
}

// errMknod marks a failed mknod of one of devNodes.
var errMknod = errors.New("mknod")

// mountPts mounts a devpts instance with bwrap's own options and the bound.
func mountPts(dir string) error {
	opts := fmt.Sprintf("newinstance,ptmxmode=0666,mode=620,max=%d", MaxPtys)
	if err := unix.Mount("devpts", dir, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, opts); err != nil {
		return fmt.Errorf("mounting a devpts (%s) on %s: %w", opts, dir, err)
	}
	return nil
}

func (d *devInstance) populate(uid, gid int) error {
	for _, n := range devNodes {
		p := filepath.Join(d.dir, n.name)
		if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
			return fmt.Errorf("%w %s: %w", errMknod, n.name, err)
		}
		// mknod's mode passes through the process's umask.
		if err := unix.Chmod(p, 0o666); err != nil {
			return err
		}
	}
	for _, l := range devLinks {
		if err := os.Symlink(l[1], filepath.Join(d.dir, l[0])); err != nil {
			return err
		}
	}
	shm := filepath.Join(d.dir, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		return err
	}
	if err := os.Chown(shm, uid, gid); err != nil {
		return err
	}
	pts := filepath.Join(d.dir, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return err
	}
	return mountPts(pts)
}

// remove unmounts the instance, its devpts with it (or the devpts alone) (its ptys are gone
// with the sandbox's processes; a descriptor still held elsewhere keeps
// it until closed), and removes its folder when the runner made it where
// no caller removes it.
func (d *devInstance) remove() error {
	if err := unix.Unmount(d.dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmounting the sandbox's /dev %s: %w", d.dir, err)
	}
	if !d.rmdir {
		return nil
	}
	if err := os.Remove(d.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the sandbox's /dev folder: %w", err)
	}
	return nil
}
