package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
)

// tidyHelperEnv makes the test binary play `harnessfacts run`: a process
// whose runs' cgroups go below its own cgroup (no placement, no
// CgroupParent), started in fresh cgroups the test made for it.
const tidyHelperEnv = "HARNESSFACTS_TEST_TIDY_HELPER"

// Runs below the caller's own cgroup leave nothing there: the
// "harnessfacts" directory goes with the last run in it, also when eight
// runs start and end at once (one may remove it while another makes its
// cgroup in it, which then makes it again).
func TestRunsBelowTheirCallersCgroupLeaveNothing(t *testing.T) {
	requireBwrapHost(t)
	if cgroups.Mode() == cgroups.Unified {
		t.Skip("needs the v1 hierarchies to start the helper in cgroups of its own (on a unified host the caller's cgroup must be a delegated leaf)")
	}
	var dirs []string
	for _, c := range v1Controllers() {
		d := filepath.Join("/sys/fs/cgroup", c, fmt.Sprintf("harnessfacts-test-tidy-%d", os.Getpid()))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	t.Cleanup(func() {
		for _, d := range dirs {
			_ = os.Remove(filepath.Join(d, cgroupPrefix))
			for i := 0; i < 50 && os.Remove(d) != nil; i++ {
				time.Sleep(20 * time.Millisecond) // the helper's exit may lag
			}
		}
	})
	base := testBase(t)
	cmd := exec.Command("sh", "-c", `for d in $HF_TIDY_CGROUPS; do echo $$ > "$d/cgroup.procs" || exit 1; done; exec "$0" -test.run='^$'`, os.Args[0])
	cmd.Env = append(os.Environ(), tidyHelperEnv+"="+base, "HF_TIDY_CGROUPS="+strings.Join(dirs, " "))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "runs: 8 of 8 exit 0") {
		t.Errorf("the helper's runs:\n%s", out)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, cgroupPrefix)); err == nil {
			t.Errorf("%s is left after the runs", filepath.Join(d, cgroupPrefix))
		}
	}
}

// tidyHelper runs eight sandboxes at once below its own cgroup, in run dirs
// below base.
func tidyHelper(base string) int {
	r, err := NewBwrapRunner(Options{})
	if err != nil {
		fmt.Println("helper-error:", err)
		return 1
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dir := filepath.Join(base, fmt.Sprint(i))
			if err := os.MkdirAll(dir, 0o777); err != nil {
				fmt.Println("helper-error:", err)
				return
			}
			_ = os.Chmod(dir, 0o777)
			res, err := r.Run(context.Background(), Spec{Argv: []string{"true"}, Dir: dir, ReadWrite: []string{dir},
				Env: []string{"PATH=/usr/bin:/bin"}, Limits: Limits{Timeout: time.Minute}})
			mu.Lock()
			defer mu.Unlock()
			if err != nil || res.ExitCode != 0 {
				fmt.Println("helper-error:", res.ExitCode, err)
				return
			}
			ok++
		}()
	}
	wg.Wait()
	fmt.Printf("runs: %d of 8 exit 0\n", ok)
	return 0
}
