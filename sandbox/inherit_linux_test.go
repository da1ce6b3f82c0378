package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// inheritHelperEnv makes the test binary play a program started with a
// descriptor it was not meant to pass on (a shell's pipe; a file a script
// opened without close-on-exec), at inheritFD, that then runs a sandbox and
// a plain child, each listing its descriptors.
const inheritHelperEnv = "HARNESSFACTS_TEST_INHERIT_HELPER"

const inheritFD = 10

// Whatever started the process that runs sandboxes left open does not
// reach the sandbox, nor any other child: `harnessfacts run` from a shell
// passed the shell's pipes into the agent's sandbox (bwrap hands on what it
// is given), where the agent could write to them.
func TestInheritedDescriptorsStayOutOfSandboxes(t *testing.T) {
	requireBwrapHost(t)
	base := testBase(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), inheritHelperEnv+"="+runDir(t, base).Dir)
	cmd.ExtraFiles = make([]*os.File, inheritFD-3+1)
	cmd.ExtraFiles[inheritFD-3] = w
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			got[k] = strings.Fields(v)
		}
	}
	if len(got["helper"]) == 0 || !contains(got["helper"], fmt.Sprint(inheritFD)) {
		t.Fatalf("the helper itself did not have descriptor %d (the checks below would prove nothing):\n%s", inheritFD, out)
	}
	for _, who := range []string{"sandbox", "plain"} {
		if len(got[who]) == 0 {
			t.Fatalf("no listing from the %s child:\n%s", who, out)
		}
		if contains(got[who], fmt.Sprint(inheritFD)) {
			t.Errorf("the %s child had the inherited descriptor %d: %v", who, inheritFD, got[who])
		}
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// inheritHelper runs in the helper process, in run dir dir.
func inheritHelper(dir string) int {
	defer removeTestCgroupParent() // this process's own (its pid in the name)
	fds := func(list string) string { return strings.Join(strings.Fields(list), " ") }
	own, err := exec.Command("sh", "-c", "ls /proc/$PPID/fd").Output()
	if err != nil {
		fmt.Println("helper-error:", err)
		return 2
	}
	fmt.Println("helper:", fds(string(own)))
	r, err := NewBwrapRunner(Options{CgroupParent: testCgroupParent})
	if err != nil {
		fmt.Println("helper-error:", err)
		return 2
	}
	var b strings.Builder
	res, err := r.Run(context.Background(), Spec{
		Argv: []string{"ls", "/proc/self/fd"}, Dir: dir, ReadWrite: []string{dir},
		Env: []string{"PATH=/usr/bin:/bin"}, Limits: Limits{Timeout: time.Minute}, Stdout: &b, Stderr: &b,
	})
	if err != nil || res.ExitCode != 0 {
		fmt.Println("helper-error:", res, err, b.String())
		return 1
	}
	fmt.Println("sandbox:", fds(b.String()))
	plain, err := exec.Command("ls", "/proc/self/fd").Output()
	if err != nil {
		fmt.Println("helper-error:", err)
		return 1
	}
	fmt.Println("plain:", fds(string(plain)))
	return 0
}

// A process whose inherited descriptors could not be marked starts no
// sandbox: they would reach it.
func TestNoRunnerWhenInheritedDescriptorsStayOpen(t *testing.T) {
	saved := inheritedErr
	defer func() { inheritedErr = saved }()
	inheritedErr = fmt.Errorf("no /proc")
	if _, err := NewBwrapRunner(Options{}); err == nil || !strings.Contains(err.Error(), "inherited") {
		t.Fatalf("NewBwrapRunner: %v, want a refusal naming the inherited descriptors", err)
	}
}
