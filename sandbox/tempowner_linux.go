package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// The folders a sandbox makes in the host's temporary folder (a preflight's
// run dir, the /dev instance of a sandbox started without a run dir of its
// own) are named for the process that made them, as runs' cgroups are
// (cgroupowner_linux.go): harnessfacts-preflight-PID-START-..., and
// harnessfacts-dev-PID-START-... with a tmpfs and a devpts mounted on it.
// They go with their maker's defers; a maker killed meanwhile (an OOM kill,
// a failed liveness probe during a node-agent's start) left them, mounts
// and all, and nothing removed them. Each preflight sweeps those whose maker
// is gone (sweepTemp).
var tempPrefixes = []string{"harnessfacts-preflight-", "harnessfacts-dev-"}

// ownedTempDir is os.MkdirTemp(dir, prefix) with this process named in it.
func ownedTempDir(dir, prefix string) (string, error) {
	if o, ok := selfOwner(); ok {
		prefix += fmt.Sprintf("%d-%d-", o.pid, o.start)
	}
	return os.MkdirTemp(dir, prefix)
}

// tempOwner reads the maker of a temporary folder from its name.
func tempOwner(name string) (cgroupOwner, bool) {
	for _, p := range tempPrefixes {
		if rest, ok := strings.CutPrefix(name, p); ok {
			return runOwner("run-" + rest)
		}
	}
	return cgroupOwner{}, false
}

// sweepTemp removes the temporary folders of makers that are gone, their
// mounts first, and returns what it removed. Folders of another pid
// namespace's processes are read as theirs only if their maker's pid and
// start tick match here, which a gone maker's never do for long.
func sweepTemp() []string {
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		o, ok := tempOwner(e.Name())
		if !ok || !e.IsDir() || o.alive() {
			continue
		}
		dir := filepath.Join(tmp, e.Name())
		for _, m := range mountsUnder(dir) {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		if err := os.RemoveAll(dir); err == nil {
			removed = append(removed, dir)
		}
	}
	return removed
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	mounts, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}
