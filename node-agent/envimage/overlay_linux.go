package envimage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Overlay is one run's writable view of an image: an overlay file system
// whose lower layer is the cached image, seen through an idmapped mount
// that shows root's files as owned by the run's host uid, and whose upper
// layer is a folder of the run. The sandbox maps its root (uid 0) to that
// same host uid, so the run is root inside, may write anywhere in the
// image (the writes land in the upper layer, the cache never changes) and
// is nobody on the host.
type Overlay struct {
	// Root is the merged file system, the sandbox's root.
	Root string
	dir  string
}

// Mount mounts an overlay of image (an Image's Root) at dir/root, with
// dir/upper and dir/work beside it, for the host uid/gid the run's
// sandbox maps to root. It needs CAP_SYS_ADMIN in the initial user
// namespace (a node-agent running as root, or a privileged pod), a kernel
// with idmapped mounts and overlayfs layers given as file descriptors
// (6.13 or later), and an image cache on a file system that supports
// idmapped mounts (ext4, xfs, btrfs, tmpfs). The mount is made nosuid and
// nodev.
func Mount(image, dir string, uid, gid int) (o *Overlay, err error) {
	if uid <= 0 || gid <= 0 {
		return nil, errors.New("envimage: an overlay for host root: refused")
	}
	o = &Overlay{Root: filepath.Join(dir, "root"), dir: dir}
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{dir, upper, work, o.Root} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("envimage: %w", err)
		}
	}
	// The upper layer's root folder is the sandbox root's: root's inside.
	if err := os.Chown(upper, uid, gid); err != nil {
		return nil, fmt.Errorf("envimage: %w", err)
	}
	if err := os.Chmod(upper, 0o755); err != nil {
		return nil, fmt.Errorf("envimage: %w", err)
	}
	// bwrap, running as uid, must reach the merged root.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, fmt.Errorf("envimage: %w", err)
	}
	userns, cleanup, err := userNamespace(uid, gid)
	if err != nil {
		return nil, fmt.Errorf("envimage: a user namespace for the idmapped mount: %w", err)
	}
	defer cleanup()
	tree, err := unix.OpenTree(unix.AT_FDCWD, image, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("envimage: open_tree %s: %w", image, err)
	}
	defer unix.Close(tree)
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(userns.Fd()),
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return nil, fmt.Errorf("envimage: an idmapped mount of the image (the image cache's file system must support idmapped mounts, and the node-agent needs CAP_SYS_ADMIN): %w", err)
	}
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("envimage: fsopen overlay: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetFd(fsfd, "lowerdir+", tree); err != nil {
		return nil, fmt.Errorf("envimage: overlay lower layer by file descriptor (kernel 6.13 or later): %w", err)
	}
	for k, v := range map[string]string{"upperdir": upper, "workdir": work} {
		if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
			return nil, fmt.Errorf("envimage: overlay %s: %w", k, err)
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return nil, fmt.Errorf("envimage: overlay: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return nil, fmt.Errorf("envimage: fsmount overlay: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, o.Root, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return nil, fmt.Errorf("envimage: mounting the overlay at %s: %w", o.Root, err)
	}
	return o, nil
}

// Unmount detaches the overlay; the run dir's removal takes the upper layer.
func (o *Overlay) Unmount() error {
	if o == nil {
		return nil
	}
	if err := unix.Unmount(o.Root, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("envimage: unmounting %s: %w", o.Root, err)
	}
	return nil
}

// userNamespace returns a user namespace that maps 0 to uid (and gid).
// As containerd does for its idmapped mounts, a child is started in a new
// user namespace with PTRACE_TRACEME, so it stops at its execve before
// running anything; its namespace is opened and the child killed.
func userNamespace(uid, gid int) (*os.File, func(), error) {
	runtime.LockOSThread() // the tracer is this thread
	defer runtime.UnlockOSThread()
	proc, err := os.StartProcess("/proc/self/exe", []string{"harnessfacts-userns"}, &os.ProcAttr{
		Env: []string{},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
			Ptrace:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	})
	if err != nil {
		return nil, nil, err
	}
	stop := func() {
		_ = proc.Kill()
		_, _ = proc.Wait()
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", proc.Pid))
	if err != nil {
		stop()
		return nil, nil, err
	}
	return f, func() { _ = f.Close(); stop() }, nil
}
