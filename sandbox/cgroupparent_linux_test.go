package sandbox

import (
	"os"
	"path/filepath"
)

// removeTestCgroupParent removes testCgroupParent from every hierarchy once
// the tests are done (each test already checked its run cgroups are gone).
func removeTestCgroupParent() {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + testCgroupParent)
	dirs = append(dirs, "/sys/fs/cgroup/"+testCgroupParent)
	for _, d := range dirs {
		_ = os.Remove(filepath.Join(d, cgroupPrefix))
		_ = os.Remove(d)
	}
}
