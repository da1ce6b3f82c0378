package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/cgroups/v3"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// DefaultCgroupMount is where a unified (cgroup v2) host mounts its
// hierarchy.
const DefaultCgroupMount = "/sys/fs/cgroup"

// WritableCgroup2 returns a writable cgroup2 mount for per-run cgroups on a
// unified host: DefaultCgroupMount when it is writable (a node-agent on the
// host, or a privileged pod), else a fresh cgroup2 mounted at dir.
//
// A container runtime mounts /sys/fs/cgroup read-only in a pod even when it
// delegates the container's cgroup to it (cgroup namespace, and with a pod
// user namespace the cgroup is owned by the pod's root). A fresh cgroup2
// mount in the pod's own mount namespace shows that same delegated subtree,
// writable; it needs CAP_SYS_ADMIN over the pod's namespaces and changes
// nothing on the host. mounted reports whether this call mounted dir, so
// the caller can say so: a mount is never made silently. On a host with
// cgroup v1 hierarchies (legacy or hybrid) it does nothing and returns "".
func WritableCgroup2(dir string) (mount string, mounted bool, err error) {
	if cgroups.Mode() != cgroups.Unified {
		return "", false, nil
	}
	return writableCgroup2(DefaultCgroupMount, dir)
}

func writableCgroup2(std, dir string) (string, bool, error) {
	if ok, err := writableCgroup2At(std); err != nil {
		return "", false, err
	} else if ok {
		return std, false, nil
	}
	if ok, err := writableCgroup2At(dir); err == nil && ok {
		return dir, false, nil // mounted by an earlier start of this pod
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("cgroup v2: %s is read-only and %w", std, err)
	}
	if err := unix.Mount("cgroup2", dir, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "", false, fmt.Errorf("cgroup v2: %s is read-only (as a container runtime mounts it in a pod), and mounting a writable cgroup2 at %s failed: %w; "+
			"the node-agent needs CAP_SYS_ADMIN over its pod's namespaces for this (the chart grants it), or run it privileged", std, dir, err)
	}
	return dir, true, nil
}

// writableCgroup2At reports whether path is a cgroup2 mount point that is
// not read-only; false with no error when it is no cgroup2 at all.
func writableCgroup2At(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("cgroup v2: %s: %w", path, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return false, nil
	}
	return st.Flags&unix.ST_RDONLY == 0, nil
}

// cgroup2Mounts lists the cgroup2 mount points of this mount namespace.
// mountinfo unescapes the octal escapes the kernel writes for spaces and
// other bytes in a mount point.
func cgroup2Mounts() []string {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, filepath.Clean(m.Mountpoint))
	}
	return out
}

// isNamespaceRoot reports whether the cgroup at mount/own, where own is
// "/", is the root of a cgroup namespace rather than the host's root
// cgroup: only non-root cgroups have cgroup.type, and only they are bound
// by the no-internal-processes rule.
func isNamespaceRoot(mount string) bool {
	_, err := os.Stat(filepath.Join(mount, "cgroup.type"))
	return err == nil
}
