package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
)

// testCgroupParent holds the per-run cgroups of these tests, apart from
// those of other test packages running at the same time, so that the checks
// for leftover cgroups see only this package's.
var testCgroupParent = fmt.Sprintf("harnessfacts-test-%d", os.Getpid())

// removeTestCgroupParent removes testCgroupParent from every hierarchy once
// the tests are done (each test already checked its run cgroups are gone).
func removeTestCgroupParent() {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + testCgroupParent + "*")
	more, _ := filepath.Glob("/sys/fs/cgroup/" + testCgroupParent + "*")
	dirs = append(dirs, more...)
	for _, d := range dirs {
		_ = os.Remove(filepath.Join(d, cgroupPrefix))
		_ = os.Remove(d)
	}
}
