package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// prepareWritable makes the read-write paths owned by uid/gid so that the
// unprivileged user the command runs as can write them. It runs as root
// over folders the agent wrote, before every command (each check
// included), while in the plain fallback a process of the agent's that
// called setsid may still run: so it goes by descriptors, never by path.
// Each entry is opened where it is, without following a link (O_PATH,
// O_NOFOLLOW), judged by what was opened and changed through that same
// descriptor; a folder is entered by a descriptor opened from its
// parent's. Walking by path, a folder swapped for a link to /etc between
// the listing and the chown gave root's /etc/shadow to the run's uid. A
// file with more than one hard link is left alone: the other link could
// be outside the run directory.
func prepareWritable(paths []string, uid, gid int) error {
	if os.Geteuid() != 0 {
		return nil
	}
	for _, root := range paths {
		fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			err = chownTree(fd, uid, gid)
			_ = unix.Close(fd)
		}
		if err != nil {
			return fmt.Errorf("sandbox: make %s writable for uid %d: %w", root, uid, err)
		}
	}
	return nil
}

// chownTree gives the folder dirfd and everything below it to uid/gid.
func chownTree(dirfd, uid, gid int) error {
	if err := chownFD(dirfd, uid, gid); err != nil {
		return err
	}
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return err
	}
	dir := os.NewFile(uintptr(dup), "")
	defer dir.Close()
	// A few names at a time: a folder of a million entries the agent made
	// must not cost the node-agent their names all at once.
	for {
		names, err := dir.Readdirnames(256)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := chownEntries(dirfd, names, uid, gid); err != nil {
			return err
		}
	}
}

// chownEntries gives the entries names of the folder dirfd, and what is
// below them, to uid/gid.
func chownEntries(dirfd int, names []string, uid, gid int) error {
	for _, name := range names {
		fd, err := unix.Openat(dirfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue // gone since the listing
		}
		if err != nil {
			return err
		}
		var st unix.Stat_t
		err = unix.Fstat(fd, &st)
		if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err == nil {
				err = chownFD(fd, uid, gid)
			}
			_ = unix.Close(fd)
			if err != nil {
				return err
			}
			continue
		}
		_ = unix.Close(fd)
		sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue // no longer a folder: swapped since, and not entered
		}
		if err != nil {
			return err
		}
		err = chownTree(sub, uid, gid)
		_ = unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// chownFD gives what fd is (itself, never what a link names) to uid/gid,
// unless it is theirs already or a file with another hard link.
func chownFD(fd, uid, gid int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
		return nil
	}
	return unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}
