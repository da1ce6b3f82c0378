//go:build linux

package artifacts

import (
	"errors"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

const oNonblock = syscall.O_NONBLOCK

// openBeneath opens rel with openat2 beneath the workspace: no symbolic
// link (RESOLVE_NO_SYMLINKS), no escape (RESOLVE_BENEATH), no magic link,
// no mount crossing, non-blocking. Kernels without openat2 (before 5.6, or
// a seccomp filter refusing it) get the portable walk.
func openBeneath(workspace, rel string) (*os.File, error) {
	dirfd, err := unix.Open(workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, reject("the workspace folder is not a directory: links are not followed")
		}
		return nil, err
	}
	defer unix.Close(dirfd)
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), rel), nil
	case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
		// No openat2 here, or a seccomp filter refuses it (root never gets
		// EPERM from a plain read-only open).
		return openPortable(workspace, rel)
	case errors.Is(err, unix.ENOENT):
		return nil, reject("missing: the agent did not create it")
	case errors.Is(err, unix.ELOOP):
		// Say which component is the link; the walk is diagnosis only.
		if werr := refuseLinks(workspace, rel); werr != nil {
			return nil, werr
		}
		return nil, reject("a symbolic link: links are not followed")
	case errors.Is(err, unix.EXDEV):
		return nil, reject("outside the workspace or on another mount")
	case errors.Is(err, unix.ENOTDIR):
		return nil, reject("a parent of the path is not a directory")
	case errors.Is(err, unix.ENXIO), errors.Is(err, unix.EOPNOTSUPP):
		return nil, reject("not a regular file (a socket or device)")
	}
	return nil, err
}

func linkCount(_ *os.File, info os.FileInfo) (uint64, error) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, errors.New("no link count")
	}
	return uint64(st.Nlink), nil
}
