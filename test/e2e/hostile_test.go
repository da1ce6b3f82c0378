//go:build linux

package e2e

import (
	"context"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func scriptRun(ns, name, script string) *harnessv1.HarnessRun {
	return &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"bash", "-c", script}},
			Fixture: harnessv1.FixtureSource{Inline: &harnessv1.InlineFixture{Files: map[string]string{
				"fixture.yaml": "prompt: go\n"}}},
		},
	}
}

// TestDiskFillEndsWithDiskLimitExceeded: an agent writes far past its
// limits.disk into its workspace, ignores ENOSPC and exits 0. The kernel
// stops the writes at the limit (the run dir is a tmpfs of that size, not
// the node's disk), and the run ends with its own reason. On the old main
// the write went to the node's disk and the run passed.
func TestDiskFillEndsWithDiskLimitExceeded(t *testing.T) {
	ns := newNamespace(t, "e2e-disk")
	run := scriptRun(ns, "filler", `echo "fs=$(stat -f -c %T .)"; dd if=/dev/zero of=big bs=1M count=64 2>&1 | head -1; echo "size=$(stat -c %s big)"; exit 0`)
	disk := resource.MustParse("8Mi")
	run.Spec.Limits.Disk = &disk
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	if got.Status.Reason != harnessv1.ReasonDiskLimitExceeded || got.Status.Verdict != harnessv1.VerdictFail || got.Status.FailureClass != harnessv1.FailureAgent {
		t.Fatalf("status %s/%s/%s: %s\noutput: %s", got.Status.Verdict, got.Status.FailureClass, got.Status.Reason, got.Status.Message, outputTail(got))
	}
	out := outputTail(got)
	if !strings.Contains(out, "fs=tmpfs") || !strings.Contains(out, "No space left on device") {
		t.Errorf("the agent's writes did not go to a tmpfs or were not refused:\n%s", out)
	}
	m := regexp.MustCompile(`size=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Errorf("no size printed:\n%s", out)
	} else if n, _ := strconv.Atoi(m[1]); n > 8<<20 || n < 4<<20 {
		t.Errorf("the file has %d bytes; the limit is 8 MiB:\n%s", n, out)
	}
	if got.Status.Sandbox == nil || !strings.Contains(got.Status.Sandbox.Seccomp, "@sha256:") {
		t.Errorf("status.sandbox.seccomp does not name the filter: %+v", got.Status.Sandbox)
	}
	waitNoRunDirs(t)
}

// TestNoRoomLeftForTheVerifierPart: the verifier part is written into the
// run dir after the agent, on the same limits.disk. An agent that fills it
// but for a few KiB (less than the verifier part needs) is not "full", and
// every check could not run: a run that read as the fixture's fault (class
// Check). It is the agent's: DiskLimitExceeded, saying why.
func TestNoRoomLeftForTheVerifierPart(t *testing.T) {
	ns := newNamespace(t, "e2e-disk-checks")
	run := scriptRun(ns, "no-room", `dd if=/dev/zero of=small bs=32k count=1 2>/dev/null; dd if=/dev/zero of=big bs=64k 2>/dev/null; rm -f small; `+
		`echo "free=$(( $(stat -f -c %a .) * $(stat -f -c %S .) ))"; exit 0`)
	run.Spec.Fixture.Inline.Files["fixture.yaml"] = "prompt: go\nchecks:\n- {name: honest, shell: 'cmp -s a \"$HARNESSFACTS_TESTS/expected.txt\"'}\n"
	run.Spec.Fixture.Inline.Files["tests/expected.txt"] = strings.Repeat("x", 256<<10)
	disk := resource.MustParse("8Mi")
	run.Spec.Limits.Disk = &disk
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	if got.Status.Reason != harnessv1.ReasonDiskLimitExceeded || got.Status.FailureClass != harnessv1.FailureAgent ||
		!strings.Contains(got.Status.Message, "too little of the run dir") {
		t.Fatalf("status %s/%s/%s: %s; checks %+v\noutput: %s", got.Status.Verdict, got.Status.FailureClass, got.Status.Reason, got.Status.Message, got.Status.Checks, outputTail(got))
	}
	waitNoRunDirs(t)
}

// TestChecksCannotBeSqueezedOntoTheWorkspace: each check runs over an
// overlay of the workspace made in the run dir, whose inodes the agent
// shares. An agent left it exactly as many free as the verifier part and
// the first check's folders take, so that only the overlay's second folder
// failed; the first check then ran the agent's build over the workspace
// itself, which copied the expected answer in (and freed the room), and
// the second check's cmp passed: Pass, signed, with the artifact still
// wrong. In the second form the agent's build fills its check's TMPDIR
// (never removed then) to starve the next check's overlay. Whatever the
// number of inodes left, no run may pass: a check whose view cannot be
// made (where overlays can be mounted) does not run, and each check's
// folders go when it ends.
func TestChecksCannotBeSqueezedOntoTheWorkspace(t *testing.T) {
	ns := newNamespace(t, "e2e-squeeze")
	// leave fills the folder $1 with empty files until the run dir has $2
	// inodes free.
	const leave = `leave() { python3 - "$1" "$2" <<'P'
import os, sys
d, n = sys.argv[1], int(sys.argv[2]); os.makedirs(d, exist_ok=True); i = 0
while os.statvfs(d).f_ffree > n:
    for _ in range(max(1, min(500, os.statvfs(d).f_ffree - n))):
        open("%s/%d" % (d, i), "w").close(); i += 1
P
}
`
	answer := "cmp -s count.txt \"$HARNESSFACTS_TESTS/expected.txt\""
	forms := []struct {
		name, agent, checks string
		inodes              []int
	}{
		{
			name: "agent",
			agent: leave + `echo 7 > count.txt
printf 'cp "$HARNESSFACTS_TESTS/expected.txt" count.txt 2>/dev/null; rm -rf fill; true\n' > build.sh
leave fill "$LEAVE"`,
			checks: "- {name: builds, shell: sh ./build.sh}\n- {name: answer, shell: '" + answer + "'}\n",
			inodes: []int{0, 2, 4, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 20, 24, 30},
		},
		{
			name: "build",
			agent: leave + `echo 7 > count.txt; mkdir spare; for i in $(seq 64); do : > spare/$i; done
{ declare -f leave; printf 'leave "$TMPDIR/fill" %s\n' "$LEAVE"; } > build.sh
printf 'cp "$HARNESSFACTS_TESTS/expected.txt" count.txt 2>/dev/null; rm -rf spare; true\n' > test.sh`,
			checks: "- {name: builds, shell: bash ./build.sh}\n- {name: tests, shell: sh ./test.sh}\n- {name: answer, shell: '" + answer + "'}\n",
			inodes: []int{0, 4, 8, 9, 10, 11, 12, 14, 20},
		},
	}
	var runs []*harnessv1.HarnessRun
	for _, f := range forms {
		for _, n := range f.inodes {
			run := scriptRun(ns, f.name+"-"+strconv.Itoa(n), "LEAVE="+strconv.Itoa(n)+"\n"+f.agent)
			run.Spec.Fixture.Inline.Files["fixture.yaml"] = "prompt: count\nartifacts: [count.txt]\nchecks:\n" + f.checks
			run.Spec.Fixture.Inline.Files["tests/expected.txt"] = "3\n"
			disk := resource.MustParse("4Mi")
			run.Spec.Limits.Disk = &disk
			if err := k8s.Create(context.Background(), run); err != nil {
				t.Fatal(err)
			}
			runs = append(runs, run)
		}
	}
	checked := 0
	for _, run := range runs {
		got := waitTerminal(t, client.ObjectKeyFromObject(run))
		st := got.Status
		if st.Verdict == harnessv1.VerdictPass {
			t.Errorf("%s passed with a wrong answer: %s; checks %+v\noutput: %s", run.Name, st.Message, st.Checks, outputTail(got))
		}
		if st.Reason == harnessv1.ReasonChecksFailed {
			checked++
		}
	}
	// Where the agent left room, the checks ran and the answer failed:
	// the test judges runs whose checks ran, not only runs stopped early.
	if checked == 0 {
		t.Error("no run had its checks run and fail: the fixture never reached its checks")
	}
	waitNoRunDirs(t)
}

// TestAgentCommandThatCannotStart: a command that is missing or is a
// folder is the agent's failure, and the message says what the shells'
// exit code means (127 not found, 126 found but not executable) and where
// the reason is: bwrap's own words at the end of the output. The message
// said only "the agent exited with code 127" once, and "code 1" when the
// agent was no longer started by sandbox-init.
func TestAgentCommandThatCannotStart(t *testing.T) {
	ns := newNamespace(t, "e2e-nostart")
	for name, c := range map[string]struct{ command, output, hint string }{
		"missing": {"/nonexistent/agent", "no such file or directory", "127: a command that was not found or could not be started; the end of the agent's output says why"},
		"folder":  {"/usr", "permission denied", "126: a command that was found but could not be executed; the end of the agent's output says why"},
	} {
		run := scriptRun(ns, name, "")
		run.Spec.Agent.Command = []string{c.command}
		if err := k8s.Create(context.Background(), run); err != nil {
			t.Fatal(err)
		}
		got := waitTerminal(t, client.ObjectKeyFromObject(run))
		st := got.Status
		if st.Reason != harnessv1.ReasonAgentFailed || st.FailureClass != harnessv1.FailureAgent || !strings.Contains(st.Message, c.hint) {
			t.Errorf("%s: %s/%s %q", name, st.FailureClass, st.Reason, st.Message)
		}
		if out := strings.ToLower(outputTail(got)); !strings.Contains(out, "execvp "+c.command) || !strings.Contains(out, c.output) {
			t.Errorf("%s: the output does not say why: %q", name, out)
		}
	}
	waitNoRunDirs(t)
}

// TestConcurrentRunsHaveTheirOwnUIDs: two runs on one node at once run as
// different unprivileged uids of the node-agent's range (every run was
// 65534 before), and neither sees the node's cgroup tree, where the other's
// cgroup is (sandbox.NodeDirs), nor a run's name in its mount table, which
// lists every run dir mounted on the node (their names held the run's).
func TestConcurrentRunsHaveTheirOwnUIDs(t *testing.T) {
	ns := newNamespace(t, "e2e-uids")
	script := `echo "uid=$(id -u) gid=$(id -g) cgroups=$(ls -A /sys/fs/cgroup | wc -l) names=$(grep -c -e harnessfacts-one- -e harnessfacts-two- /proc/self/mountinfo)"; sleep 4`
	runs := []*harnessv1.HarnessRun{scriptRun(ns, "one", script), scriptRun(ns, "two", script)}
	for _, r := range runs {
		if err := k8s.Create(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	uids := make([]string, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := waitTerminal(t, client.ObjectKeyFromObject(r))
			if got.Status.Verdict != harnessv1.VerdictPass {
				t.Errorf("%s: %s %s", r.Name, got.Status.Reason, got.Status.Message)
			}
			if m := regexp.MustCompile(`uid=(\d+) gid=(\d+) cgroups=(\d+) names=(\d+)`).FindStringSubmatch(outputTail(got)); m != nil && m[1] == m[2] {
				uids[i] = m[1]
				if m[3] != "0" {
					t.Errorf("%s saw %s entries in the node's /sys/fs/cgroup", r.Name, m[3])
				}
				if m[4] != "0" {
					t.Errorf("%s saw %s mounts named after a run", r.Name, m[4])
				}
			} else {
				t.Errorf("%s printed no uid equal to its gid: %s", r.Name, outputTail(got))
			}
		}()
	}
	wg.Wait()
	if uids[0] == uids[1] || uids[0] == "65534" || uids[1] == "65534" {
		t.Errorf("the two runs ran as uids %v", uids)
	}
	for _, u := range uids {
		if len(u) != 5 || u < "60000" || u > "60127" {
			t.Errorf("uid %s is outside the default range 60000-60127", u)
		}
	}
	waitNoRunDirs(t)
}

func outputTail(r *harnessv1.HarnessRun) string {
	if r.Status.Agent == nil {
		return ""
	}
	return r.Status.Agent.OutputTail
}

// TestFixtureGitConfigDoesNotRunForTheAgent: a fixture's workspace may be
// a repository, whose config names commands git runs by itself
// (core.fsmonitor runs at every `git status`). An agent CLI runs git at its
// start, before any decision of the model (Claude Code does): the fixture
// author's command ran with the agent's home, credentials and MCP token.
// The fixture's git config is made safe before the agent, as it is before
// the checks, and the run says what was dropped.
func TestFixtureGitConfigDoesNotRunForTheAgent(t *testing.T) {
	ns := newNamespace(t, "e2e-fixture-git")
	run := scriptRun(ns, "fsmonitor", `git status >/dev/null 2>&1; echo "bare=$(git config --get core.bare)"; if [ -e fsm.txt ]; then echo FSMONITOR-RAN; cat fsm.txt; fi; exit 0`)
	for name, body := range map[string]string{
		"workspace/a.txt":                 "hi\n",
		"workspace/.git/HEAD":             "ref: refs/heads/main\n",
		"workspace/.git/objects/.keep":    "",
		"workspace/.git/refs/heads/.keep": "",
		"workspace/.git/config":           "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = \"echo ran as $(id -u) >> fsm.txt; true\"\n",
	} {
		run.Spec.Fixture.Inline.Files[name] = body
	}
	if err := k8s.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := waitTerminal(t, client.ObjectKeyFromObject(run))
	out := outputTail(got)
	if strings.Contains(out, "FSMONITOR-RAN") {
		t.Errorf("the fixture's core.fsmonitor ran in the agent's sandbox:\n%s", out)
	}
	// The repository is still one: only the commands were dropped.
	if !strings.Contains(out, "bare=false") {
		t.Errorf("the workspace's repository lost its config:\n%s", out)
	}
	if got.Status.Agent == nil || !slices.ContainsFunc(got.Status.Agent.Notes, func(n string) bool {
		return strings.Contains(n, "the fixture's git config was made safe before the agent ran: dropped 1 keys from .git/config")
	}) {
		t.Errorf("the run does not say what of the fixture's git config was dropped: %+v", got.Status.Agent)
	}
	waitNoRunDirs(t)
}
