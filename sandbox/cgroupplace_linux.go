package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/moby/sys/mountinfo"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func placeNodeAgent(opts Options, memoryLimit int64) (Options, Placement, error) {
	if cgroups.Mode() == cgroups.Unified {
		return placeV2(opts, cgroup2Mount(opts), memoryLimit)
	}
	return placeV1(opts, memoryLimit)
}

// placeV1 places the caller in <own>/agent of the memory and pids
// hierarchies when memoryLimit is set, and fixes the runs' parent in each.
// cgroup v1 has no no-internal-processes rule, so without a limit the
// node-agent may stay where it is: its runs are then below it, unbounded
// by anything of its own.
func placeV1(opts Options, memoryLimit int64) (Options, Placement, error) {
	subs, err := v1Hierarchy()
	if err != nil {
		return opts, Placement{}, err
	}
	own := map[cgroup1.Name]string{}
	parents := map[string]string{}
	p := Placement{Version: 1}
	for _, s := range subs {
		n := s.Name()
		if own[n], err = ownCgroupV1(n); err != nil {
			return opts, Placement{}, fmt.Errorf("cgroup v1: %w", err)
		}
		parents[string(n)] = own[n]
		if opts.CgroupParent != "" {
			parents[string(n)] = filepath.Join("/", opts.CgroupParent)
		}
		p.Runs = append(p.Runs, filepath.Join(v1Dir(s, parents[string(n)]), cgroupPrefix))
	}
	opts.runParents = parents
	if memoryLimit == 0 {
		p.release = p.removeRunParents
		return opts, p, nil
	}
	leaf := func(n cgroup1.Name) (string, error) {
		o, ok := own[n]
		if !ok {
			return "", cgroup1.ErrControllerNotActive
		}
		return filepath.Join(o, AgentLeaf), nil
	}
	res := &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &memoryLimit, Swap: &memoryLimit}}
	cg, err := cgroup1.New(leaf, res, cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) { return subs, nil }))
	if err != nil {
		return opts, Placement{}, fmt.Errorf("cgroup v1: make the node-agent's leaf cgroup with its memory limit: %w", err)
	}
	if err := cg.AddProc(uint64(os.Getpid())); err != nil {
		_ = cg.Delete()
		return opts, Placement{}, fmt.Errorf("cgroup v1: move the node-agent into its leaf cgroup: %w", err)
	}
	for _, s := range subs {
		p.Agent = append(p.Agent, v1Dir(s, filepath.Join(own[s.Name()], AgentLeaf)))
	}
	p.MemoryLimit = memoryLimit
	p.release = func() error {
		var errs []error
		for _, s := range subs {
			back := filepath.Join(v1Dir(s, own[s.Name()]), "cgroup.procs")
			if err := os.WriteFile(back, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
				errs = append(errs, fmt.Errorf("cgroup v1: move the node-agent back to %s: %w", back, err))
			}
		}
		if len(errs) == 0 {
			if err := cg.Delete(); err != nil {
				errs = append(errs, fmt.Errorf("cgroup v1: remove the node-agent's leaf: %w", err))
			}
		}
		_ = p.removeRunParents()
		return errors.Join(errs...)
	}
	return opts, p, nil
}

// placeV2 moves the caller's cgroup's processes into <own>/agent when a
// memory limit is asked or the runs' cgroups go below <own> (the
// no-internal-processes rule), and fixes the runs' parent.
func placeV2(opts Options, mount string, memoryLimit int64) (Options, Placement, error) {
	own, err := ownCgroupV2(mount)
	if err != nil {
		return opts, Placement{}, fmt.Errorf("cgroup v2: %w", err)
	}
	parent := own
	if opts.CgroupParent != "" {
		parent = filepath.Join("/", opts.CgroupParent)
	}
	opts.runParents = map[string]string{"": parent}
	p := Placement{Version: 2, Runs: []string{filepath.Join(mount, parent, cgroupPrefix)}}
	// "/" is the host's root cgroup, exempt from the rule, unless it is the
	// root of a cgroup namespace (a pod's own cgroup).
	exempt := own == "/" && !isNamespaceRoot(mount)
	leafWanted := memoryLimit > 0 || opts.MoveToLeafCgroup && opts.CgroupParent == "" && !exempt
	if !leafWanted {
		p.release = p.removeRunParents
		return opts, p, nil
	}
	dir := filepath.Join(mount, own)
	leaf := filepath.Join(dir, AgentLeaf)
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return opts, Placement{}, fmt.Errorf("cgroup v2: make the node-agent's leaf %s: %w", leaf, err)
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return opts, Placement{}, fmt.Errorf("cgroup v2: move the node-agent into %s: %w", leaf, err)
	}
	if !exempt {
		// Whatever else runs in the container goes with it, so that
		// controllers can be enabled below <own>.
		if err := evacuateToLeaf(dir, AgentLeaf); err != nil {
			return opts, Placement{}, err
		}
	}
	if memoryLimit > 0 {
		_, err := cgroup2.NewManager(mount, filepath.Join(own, AgentLeaf), &cgroup2.Resources{Memory: &cgroup2.Memory{Max: &memoryLimit}})
		if err != nil {
			return opts, Placement{}, fmt.Errorf("cgroup v2: set the node-agent's memory limit on %s (the memory controller must be available in %s): %w", leaf, filepath.Join(dir, "cgroup.controllers"), err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "memory.swap.max"), []byte("0"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return opts, Placement{}, fmt.Errorf("cgroup v2: set memory.swap.max of %s: %w", leaf, err)
		}
		p.MemoryLimit = memoryLimit
	}
	p.Agent = []string{leaf}
	p.release = func() error {
		err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
		_ = p.removeRunParents()
		if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EOPNOTSUPP) {
			// The rule again: controllers are on below <own>. The leaf
			// goes with <own> (the container's cgroup).
			return nil
		}
		if err != nil {
			return fmt.Errorf("cgroup v2: move the node-agent back to %s: %w", dir, err)
		}
		if err := os.Remove(leaf); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cgroup v2: remove the node-agent's leaf: %w", err)
		}
		return nil
	}
	return opts, p, nil
}

// removeRunParents removes the runs' parents (Runs) that are empty
// cgroups: whether or not the node-agent moved into a leaf of its own, a
// node-agent that ends leaves no "harnessfacts" directory behind in the
// cgroup it started in (a host's, where it runs outside a pod). One that
// still holds a run's cgroup (EBUSY) stays.
func (p Placement) removeRunParents() error {
	for _, d := range p.Runs {
		_ = os.Remove(d)
	}
	return nil
}

// v1Dir is the directory of cgroup path (relative to the hierarchy's mount)
// in subsystem s.
func v1Dir(s cgroup1.Subsystem, path string) string {
	if p, ok := s.(interface{ Path(string) string }); ok {
		return p.Path(path)
	}
	return filepath.Join("/sys/fs/cgroup", string(s.Name()), path)
}

// ownCgroupV1 is the caller's cgroup in the v1 hierarchy of controller n,
// relative to where that hierarchy is mounted here. Inside a container the
// runtime mounts the container's own cgroup as the root of each hierarchy,
// while /proc/self/cgroup still names the full path from the host's root;
// the mount's root is cut off. (containerd's cgroup1.NestedPath returns the
// full path when the caller sits exactly at the mount's root, which nested
// every run's cgroup below a copy of the container's path.)
func ownCgroupV1(n cgroup1.Name) (string, error) {
	return cgroupV1In("/proc/self/cgroup", n)
}

// cgroupV1In is the cgroup of controller n's v1 hierarchy that a cgroup
// file (/proc/self/cgroup, /proc/thread-self/cgroup) names, relative to
// where that hierarchy is mounted here (ownCgroupV1).
func cgroupV1In(file string, n cgroup1.Name) (string, error) {
	paths, _, err := cgroups.ParseCgroupFileUnified(file)
	if err != nil {
		return "", err
	}
	path, ok := paths[string(n)]
	if !ok {
		return "", fmt.Errorf("%s has no %s hierarchy", file, n)
	}
	root, err := v1MountRoot(n)
	if err != nil {
		return "", err
	}
	return relativeCgroup(root, path)
}

// v1MountRoots caches v1MountRoot: where a hierarchy is mounted, and what
// its mount shows as its top, do not change under a running process.
var v1MountRoots sync.Map // cgroup1.Name → string

// v1MountRoot is the cgroup the v1 hierarchy of n shows as its top here
// (a container's own, inside one).
func v1MountRoot(n cgroup1.Name) (string, error) {
	if r, ok := v1MountRoots.Load(n); ok {
		return r.(string), nil
	}
	root, err := cgroupMountRoot(func(m *mountinfo.Info) bool {
		return m.FSType == "cgroup" && slices.Contains(strings.Split(m.VFSOptions, ","), string(n))
	})
	if err != nil {
		return "", fmt.Errorf("the %s hierarchy: %w", n, err)
	}
	v1MountRoots.Store(n, root)
	return root, nil
}

// ownCgroupV2 is the caller's cgroup in the unified hierarchy, relative to
// the cgroup2 mount at mount.
func ownCgroupV2(mount string) (string, error) {
	_, path, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	if path == "" {
		return "", errors.New("no unified hierarchy entry in /proc/self/cgroup")
	}
	mount = filepath.Clean(mount)
	root, err := cgroupMountRoot(func(m *mountinfo.Info) bool {
		return m.FSType == "cgroup2" && filepath.Clean(m.Mountpoint) == mount
	})
	if err != nil {
		return "", fmt.Errorf("the cgroup2 mount at %s: %w", mount, err)
	}
	return relativeCgroup(root, path)
}

// cgroupMountRoot is the root (the cgroup it shows as its top) of the last
// mount in /proc/self/mountinfo that match accepts.
func cgroupMountRoot(match func(*mountinfo.Info) bool) (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	return lastMountRoot(f, match)
}

// lastMountRoot reads a mountinfo table with moby/sys/mountinfo, which
// unescapes the octal escapes the kernel writes for spaces, tabs, newlines
// and backslashes in paths, and returns the root of the last mount that
// match accepts.
func lastMountRoot(r io.Reader, match func(*mountinfo.Info) bool) (string, error) {
	mounts, err := mountinfo.GetMountsFromReader(r, func(m *mountinfo.Info) (skip, stop bool) {
		return !match(m), false
	})
	if err != nil {
		return "", err
	}
	if len(mounts) == 0 {
		return "", errors.New("not mounted here")
	}
	return mounts[len(mounts)-1].Root, nil
}

// relativeCgroup is path (from /proc/self/cgroup) relative to a mount whose
// root is root, as an absolute path ("/" when it is the root itself).
func relativeCgroup(root, path string) (string, error) {
	rel, err := filepath.Rel(filepath.Join("/", root), filepath.Join("/", path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("this process's cgroup %s is outside the mounted part %s of its hierarchy", path, root)
	}
	return filepath.Join("/", rel), nil
}

// runParentDirs are the directories below which this host's per-run cgroups
// are made ("<parent>/harnessfacts" of each hierarchy in use).
func runParentDirs(opts Options) ([]string, error) {
	if cgroups.Mode() == cgroups.Unified {
		mount := cgroup2Mount(opts)
		parent, err := runParentV2(opts, mount)
		if err != nil {
			return nil, err
		}
		return []string{filepath.Join(mount, parent, cgroupPrefix)}, nil
	}
	subs, err := v1Hierarchy()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, s := range subs {
		parent, err := runParentV1(opts, s.Name())
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, filepath.Join(v1Dir(s, parent), cgroupPrefix))
	}
	return dirs, nil
}

// RecoverAbandoned removes the per-run cgroups a killed node-agent left
// below the runs' parent (see PlaceNodeAgent) of every hierarchy. There is
// no profile or grant to recover on Linux. A cgroup that still holds a
// process is not removed (the kernel refuses); the node-agent kills such
// leftovers first. One made by a process that still runs is left to it,
// however old (RemoveAbandonedCgroups); one whose name says no maker (an
// earlier version's) is removed when empty, so call it before any run of
// an earlier version could start.
func RecoverAbandoned(opts Options, _ string) ([]string, error) {
	return RemoveAbandonedCgroups(opts, 0)
}

// RemoveAbandonedCgroups removes the empty per-run cgroups below the runs'
// parent whose maker is gone (cgroupowner_linux.go), whatever their age,
// and those whose name says no maker once made more than minAge ago: what
// `harnessfacts run`, which shares the parent with other local runs, may
// do. A live process's cgroup is empty for a moment after it is made and
// before it is removed; it is never taken from under it.
func RemoveAbandonedCgroups(opts Options, minAge time.Duration) ([]string, error) {
	dirs, err := runParentDirs(opts)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, d := range dirs {
		runs, _ := filepath.Glob(filepath.Join(d, "run-*"))
		for _, r := range runs {
			if o, ok := runOwner(filepath.Base(r)); ok {
				if o.alive() {
					continue
				}
			} else if minAge > 0 {
				if fi, err := os.Stat(r); err != nil || time.Since(fi.ModTime()) < minAge {
					continue
				}
			}
			if err := os.Remove(r); err == nil {
				removed = append(removed, r)
			} else if !errors.Is(err, unix.EBUSY) && !errors.Is(err, os.ErrNotExist) {
				return removed, fmt.Errorf("remove the abandoned cgroup %s: %w", r, err)
			}
		}
	}
	return removed, nil
}
