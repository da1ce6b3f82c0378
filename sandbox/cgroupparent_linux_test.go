package sandbox

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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

// removeStaleTestCgroups removes what a killed run of these tests left (a
// test binary stopped by a timeout never reaches removeTestCgroupParent):
// the harnessfacts-test-…-PID cgroups of every hierarchy whose process is
// gone, deepest first. One that still holds a process stays (rmdir fails).
func removeStaleTestCgroups() {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/harnessfacts-test-*")
	more, _ := filepath.Glob("/sys/fs/cgroup/harnessfacts-test-*")
	for _, d := range append(dirs, more...) {
		name := filepath.Base(d)
		pid, err := strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue
		}
		var tree []string
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				tree = append(tree, p)
			}
			return nil
		})
		slices.Reverse(tree)
		for _, t := range tree {
			_ = os.Remove(t)
		}
	}
}
