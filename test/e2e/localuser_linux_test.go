//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3"

	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// localUID is the user TestLocalRunAsAnotherUser runs as: not root, and not
// sandbox.DefaultUID (65534), so that what the run makes is neither root's
// nor the default sandbox user's.
const localUID = 1000

// TestLocalRunAsAnotherUser: `harnessfacts run` by a user who is not root,
// in a cgroup delegated to them (as systemd delegates a user's session),
// runs the hello fixture to Pass. Its sandbox runs as that user (it cannot
// run as anyone else), so the run's sockets and files are theirs: they were
// chowned to the default sandbox user, and the run failed RunDirFailed
// ("lchown …/sockets: operation not permitted", fs helper of 7 December).
// What it cannot do without root is said, not skipped silently: the disk
// limit is not enforced, and the checks share the workspace.
func TestLocalRunAsAnotherUser(t *testing.T) {
	dir := openDir(t)
	fixtures := filepath.Join(dir, "hello")
	if out, err := exec.Command("cp", "-r", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"), fixtures).CombinedOutput(); err != nil {
		t.Fatalf("copying the fixture: %v\n%s", err, out)
	}
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", localUID, localUID), dir).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// The user's own cgroup: memory and pids (v1, as here) or a cgroup2
	// folder of theirs, whose processes they may move.
	var enter []string
	name := "harnessfacts-e2e-user-" + filepath.Base(dir)
	var made []string
	if cgroups.Mode() == cgroups.Unified {
		d := filepath.Join("/sys/fs/cgroup", name)
		made = append(made, d)
		enter = append(enter, filepath.Join(d, "cgroup.procs"))
	} else {
		for _, c := range []string{"memory", "pids"} {
			d := filepath.Join("/sys/fs/cgroup", c, name)
			made = append(made, d)
			enter = append(enter, filepath.Join(d, "tasks"))
		}
	}
	for _, d := range made {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			// The run removed its own harnessfacts folder below.
			if err := os.Remove(d); err != nil {
				t.Errorf("the user's cgroup %s: %v (something of the run left in it?)", d, err)
			}
		})
		if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", localUID, localUID), d).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// Root moves the shell into the user's cgroup, then it becomes the
	// user for good (setpriv) and runs the harness.
	script := `for f in ` + strings.Join(enter, " ") + `; do echo $$ > "$f"; done
exec setpriv --reuid ` + fmt.Sprint(localUID) + ` --regid ` + fmt.Sprint(localUID) + ` --clear-groups env HOME="$1" XDG_CACHE_HOME="$1/.cache" XDG_CONFIG_HOME="$1/.config" "$2" run -f hello/run.yaml --run-root "$1/runs"`
	cmd := exec.Command("sh", "-c", script, "sh", dir, binary)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("harnessfacts run as uid %d: %v\nstdout:\n%s\nstderr:\n%s", localUID, err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "verdict: Pass") {
		t.Errorf("no Pass:\n%s", stdout.String())
	}
	// Each check's result says it, not only the log and the check's
	// output, whose tail the agent's code writes.
	if !strings.Contains(stdout.String(), "ran over the workspace itself") {
		t.Errorf("the checks' results do not say they shared the workspace:\n%s", stdout.String())
	}
	for _, said := range []string{"limits.disk (1Gi) was not enforced", "the checks run over the workspace itself"} {
		if !strings.Contains(stderr.String(), said) {
			t.Errorf("stderr does not say %q:\n%s", said, stderr.String())
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "runs")); len(entries) != 0 {
		t.Errorf("left in the run root: %v", entries)
	}
}
