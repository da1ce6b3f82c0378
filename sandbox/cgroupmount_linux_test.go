package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// cgroupMountHelperEnv makes the test binary play a node-agent in a pod:
// in a private mount namespace (unshare -m), with a read-only cgroup2 where
// the runtime would put /sys/fs/cgroup.
const cgroupMountHelperEnv = "HARNESSFACTS_TEST_CGROUP_MOUNT_HELPER"

// TestWritableCgroup2InAPodLikeMountNamespace: with the standard cgroup2
// mount read-only, WritableCgroup2 mounts a fresh cgroup2 where a run's
// cgroup can be made, says that it did, and finds it again on a second call;
// with a writable one it mounts nothing. It runs in a mount namespace of its
// own, so the host's mounts are untouched.
func TestWritableCgroup2InAPodLikeMountNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a mount namespace and mount cgroup2")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("needs unshare (util-linux)")
	}
	if len(cgroup2Mounts()) == 0 {
		t.Skip("this host has no cgroup2 mount")
	}
	dir := t.TempDir()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cgroupMountHelperEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"writable: mounted nothing", "read-only: mounted a fresh cgroup2", "run cgroup made", "again: found it"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("helper output lacks %q:\n%s", want, out)
		}
	}
	if mounts := cgroup2Mounts(); containsPath(mounts, filepath.Join(dir, "fresh")) {
		t.Errorf("the helper's mount leaked into the test's namespace: %v", mounts)
	}
}

// cgroupMountHelper runs in the private mount namespace.
func cgroupMountHelper(dir string) int {
	fail := func(format string, a ...any) int { fmt.Printf(format+"\n", a...); return 1 }
	src := cgroup2Mounts()[0]
	std := filepath.Join(dir, "std")
	if err := os.MkdirAll(std, 0o755); err != nil {
		return fail("%v", err)
	}
	if err := unix.Mount(src, std, "", unix.MS_BIND, ""); err != nil {
		return fail("bind %s: %v", src, err)
	}
	mount, mounted, err := writableCgroup2(std, filepath.Join(dir, "fresh"))
	if err != nil || mounted || mount != std {
		return fail("writable: got %q mounted=%v err=%v", mount, mounted, err)
	}
	fmt.Println("writable: mounted nothing")
	// What a runtime does in a pod: the same cgroup2, read-only.
	if err := unix.Mount("", std, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		return fail("remount read-only: %v", err)
	}
	if err := os.Mkdir(filepath.Join(std, "harnessfacts-probe"), 0o755); err == nil {
		return fail("the read-only cgroup2 took a mkdir")
	}
	mount, mounted, err = writableCgroup2(std, filepath.Join(dir, "fresh"))
	if err != nil || !mounted || mount != filepath.Join(dir, "fresh") {
		return fail("read-only: got %q mounted=%v err=%v", mount, mounted, err)
	}
	fmt.Println("read-only: mounted a fresh cgroup2")
	cg := filepath.Join(mount, fmt.Sprintf("harnessfacts-test-mount-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		return fail("making a cgroup in the fresh mount: %v", err)
	}
	_ = os.Remove(cg)
	fmt.Println("run cgroup made")
	mount, mounted, err = writableCgroup2(std, filepath.Join(dir, "fresh"))
	if err != nil || mounted || mount != filepath.Join(dir, "fresh") {
		return fail("again: got %q mounted=%v err=%v", mount, mounted, err)
	}
	fmt.Println("again: found it")
	return 0
}

func containsPath(list []string, p string) bool {
	for _, x := range list {
		if x == p {
			return true
		}
	}
	return false
}
