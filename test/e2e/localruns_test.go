//go:build linux

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// TestConcurrentLocalRunsCannotReachEachOther: two `harnessfacts run`s at
// once, each with a run root of its own (so neither hides the other's:
// every sandbox shows the node's root, and the other's run dir is a mount
// in it). Each runs as a uid of its own (LocalIDs), and a run dir is
// closed to every group but its run's, so the thief's agent, which finds
// the victim's run dir in its mount table, can neither read the victim's
// verifier part while the victim's check runs nor connect to its sockets.
// Before, both ran as nobody: the thief read the expected answer and
// wrote into the victim's egress proxy, whose signed receipt recorded it
// (helper 65).
func TestConcurrentLocalRunsCannotReachEachOther(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: local runs as a user all run as that user")
	}
	dir := t.TempDir()
	base := shownDir(t)
	victimRoot, thiefRoot := filepath.Join(base, "victim-runs"), filepath.Join(base, "thief-runs")
	victim := localRunYAML("victim", "prompt: wait\nchecks:\n- {name: slow, shell: 'sleep 6; grep -q 424242 \"$HARNESSFACTS_TESTS/expected.txt\"'}\n", "sleep 2; echo done", "")
	victim = strings.Replace(victim, `fixture.yaml: `, `tests/expected.txt: "424242\n", fixture.yaml: `, 1)
	thief := localRunYAML("thief", "prompt: steal\n", `
end=$(($(date +%s) + 12))
while [ "$(date +%s)" -lt "$end" ]; do
  for d in $(awk '$5 ~ /victim-runs\/harnessfacts-/ {print $5}' /proc/self/mountinfo); do
    echo "SEEN $d"
    cat "$d/fixture/tests/expected.txt" 2>&1 | sed 's/^/READ /'
    ls "$d" 2>&1 | sed 's/^/LIST /'
    python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); print("CONNECTED")' "$d/sockets/egress.sock" 2>&1 | tail -1 | sed 's/^/SOCK /'
  done
  sleep 0.5
done`, "")
	start := func(name, yamlText, root string) (*exec.Cmd, *bytes.Buffer) {
		file := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(file, []byte(yamlText), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(binary, "run", "-f", file, "-q", "--run-root", root, "--evidence", filepath.Join(dir, name+"-evidence"))
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	v, vout := start("victim", victim, victimRoot)
	time.Sleep(time.Second)
	th, tout := start("thief", thief, thiefRoot)
	_ = v.Wait()
	_ = th.Wait()
	status := func(b *bytes.Buffer) harnessv1.HarnessRunStatus {
		var out struct {
			Status harnessv1.HarnessRunStatus `json:"status"`
		}
		if err := yaml.Unmarshal(b.Bytes(), &out); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		return out.Status
	}
	vst, tst := status(vout), status(tout)
	if vst.Verdict != harnessv1.VerdictPass {
		t.Errorf("the victim: %s %s: %s", vst.Verdict, vst.Reason, vst.Message)
	}
	if tst.Agent == nil {
		t.Fatalf("the thief: no agent status: %s", tst.Message)
	}
	got := tst.Agent.OutputTail
	if !strings.Contains(got, "SEEN ") {
		t.Fatalf("the thief never saw the victim's run dir, so the test shows nothing:\n%s", got)
	}
	if strings.Contains(got, "424242") || strings.Contains(got, "CONNECTED") || strings.Contains(got, "LIST workspace") {
		t.Errorf("the thief reached the victim's run dir:\n%s", got)
	}
	if vst.Network != nil && vst.Network.Denied > 0 {
		t.Errorf("the victim's egress proxy counted requests it never made: %+v", vst.Network)
	}
}

// TestEarlierEvidenceIsHiddenFromLaterRuns: ./evidence holds earlier local
// runs' evidence, their artifacts (answers) among it; a later run's agent
// does not see it, also when the later run writes its own evidence
// elsewhere (--evidence). Before, only the folder of the run's own
// evidence was hidden (helper 65).
func TestEarlierEvidenceIsHiddenFromLaterRuns(t *testing.T) {
	cwd := shownDir(t)
	runs := filepath.Join(openDir(t), "runs")
	first := exec.Command(binary, "run", "-f", filepath.Join(testenv.RepoRoot(), "fixtures", "hello", "run.yaml"), "-q", "--run-root", runs)
	first.Dir = cwd
	if out, err := first.CombinedOutput(); err != nil {
		t.Fatalf("the first run: %v\n%s", err, out)
	}
	earlier := filepath.Join(cwd, "evidence", "hello", "latest", "receipt.json")
	if _, err := os.Stat(earlier); err != nil {
		t.Fatal(err)
	}
	laterRunCannotRead(t, cwd, runs, filepath.Join(openDir(t), "elsewhere"), earlier)
}

// laterRunCannotRead runs, in cwd, a local run writing its evidence into
// evidence whose agent prints the file earlier, and fails the test if it
// could.
func laterRunCannotRead(t *testing.T, cwd, runs, evidence, earlier string) {
	t.Helper()
	file := filepath.Join(cwd, "later.yaml")
	if err := os.WriteFile(file, []byte(localRunYAML("later", "prompt: look\n", "cat "+earlier+" && echo FOUND-EARLIER", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	later := exec.Command(binary, "run", "-f", file, "-q", "--run-root", runs, "--evidence", evidence)
	later.Dir = cwd
	out, _ := later.Output()
	var st struct {
		Status harnessv1.HarnessRunStatus `json:"status"`
	}
	if err := yaml.Unmarshal(out, &st); err != nil || st.Status.Agent == nil {
		t.Fatalf("the later run printed no status (%v):\n%s", err, out)
	}
	if strings.Contains(st.Status.Agent.OutputTail, "FOUND-EARLIER") {
		t.Errorf("the later run's agent read the earlier run's evidence:\n%s", st.Status.Agent.OutputTail)
	}
}

// TestEvidenceFoldersAreTheCallersAlone: evidence written anywhere (another
// CI workspace's ./evidence, a sibling --evidence folder) holds a run's
// artifacts, a task's answers; a later run that masks only its own
// evidence folders must not let its agent copy them. The folders are the
// caller's alone (fs helper of 7 December: a second run copied the first
// one's answer from /srv/…/evidence/…/artifacts).
func TestEvidenceFoldersAreTheCallersAlone(t *testing.T) {
	shown := shownDir(t)
	runs := filepath.Join(openDir(t), "runs")
	evidence := filepath.Join(shown, "ev", "alpha")
	first := exec.Command(binary, "run", "-f", filepath.Join(testenv.RepoRoot(), "fixtures", "hello", "run.yaml"), "-q", "--run-root", runs, "--evidence", evidence)
	first.Dir = openDir(t)
	if out, err := first.CombinedOutput(); err != nil {
		t.Fatalf("the first run: %v\n%s", err, out)
	}
	for _, d := range []string{evidence, filepath.Join(evidence, "artifacts")} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: %v, %v; want a folder of its owner's alone", d, fi, err)
		}
	}
	laterRunCannotRead(t, openDir(t), runs, filepath.Join(shown, "ev", "beta"), filepath.Join(evidence, "receipt.json"))
}

// TestPlantedEvidenceLinkIsRefused: the default evidence folder is
// ./evidence/NAME in the folder the user runs from, mostly a repository of
// tasks. A repository that carried evidence/NAME (or evidence itself) as a
// link had the run make its target 0700 and write into it (as root, /etc).
// The run refuses before it starts, naming the link, and the target is
// untouched.
func TestPlantedEvidenceLinkIsRefused(t *testing.T) {
	for _, link := range []string{"evidence/hello", "evidence"} {
		repo := openDir(t)
		victim := openDir(t)
		if err := os.Chmod(victim, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(repo, "evidence"), 0o755); err != nil {
			t.Fatal(err)
		}
		target := victim
		if link == "evidence" {
			if err := os.Remove(filepath.Join(repo, "evidence")); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(victim, "hello"), 0o755); err != nil {
				t.Fatal(err)
			}
			target = filepath.Join(victim, "hello")
		}
		if err := os.Symlink(victim, filepath.Join(repo, link)); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(binary, "run", "-f", filepath.Join(testenv.RepoRoot(), "fixtures", "hello", "run.yaml"), "-q", "--run-root", filepath.Join(openDir(t), "runs"))
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), link+" is a symbolic link") {
			t.Errorf("%s as a link: %v\n%s", link, err, out)
		}
		if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s as a link: its target %s is now %v (%v)", link, target, fi.Mode(), err)
		}
		if entries, _ := os.ReadDir(target); len(entries) != 0 {
			t.Errorf("%s as a link: written into its target: %v", link, entries)
		}
	}
}

// shownDir is a new folder outside /tmp, which every sandbox covers with a
// tmpfs of its own: what is in it is on a path sandboxes show.
func shownDir(t *testing.T) string {
	t.Helper()
	return openDirIn(t, "/var/lib")
}

// TestTaskSetRepositoryIsHiddenFromLocalAgents: a local run hides its
// fixture's folder, but a task set is mostly a git checkout, and its
// objects above the folder held the verifier part (helper 65 read an
// expected answer from them). The run hides the ".git" of every
// repository its sources are in.
func TestTaskSetRepositoryIsHiddenFromLocalAgents(t *testing.T) {
	repo := shownDir(t)
	task := filepath.Join(repo, "tasks", "hello")
	if err := os.CopyFS(task, os.DirFS(filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(task, "tests"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(task, "tests", "expected.txt"), []byte("ANSWER-IN-GIT-7317\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-qm", "the task set")
	// A linked worktree's ".git" is a file naming a folder in the main
	// repository's: that one is hidden too, and the main one, where the
	// objects are (the worktree outside the repository, so that no folder
	// above it is the repository's).
	wt := filepath.Join(shownDir(t), "wt")
	git("worktree", "add", "-q", wt)
	run := localRunYAML("thief", "prompt: steal\n", `
echo AGENT-RAN
cat `+repo+`/.git/HEAD `+wt+`/.git 2>&1
git -c safe.directory="*" -C `+repo+` log -p 2>&1 | grep ANSWER
git -c safe.directory="*" -C `+wt+` log -p 2>&1 | grep ANSWER
grep -rl ANSWER `+repo+`/.git 2>&1 | head -3
echo AGENT-DONE`, "")
	for _, file := range []string{filepath.Join(task, "run.yaml"), filepath.Join(wt, "tasks", "hello", "run.yaml")} {
		if err := os.WriteFile(file, []byte(run), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(binary, "run", "-f", file, "-q", "--run-root", filepath.Join(openDir(t), "runs"), "--evidence", filepath.Join(t.TempDir(), "evidence"))
		out, _ := cmd.Output()
		var st struct {
			Status harnessv1.HarnessRunStatus `json:"status"`
		}
		if err := yaml.Unmarshal(out, &st); err != nil || st.Status.Agent == nil {
			t.Fatalf("%s printed no status (%v):\n%s", file, err, out)
		}
		tail := st.Status.Agent.OutputTail
		if !strings.Contains(tail, "AGENT-RAN") || !strings.Contains(tail, "AGENT-DONE") {
			t.Fatalf("%s: the agent did not run to its end:\n%s", file, tail)
		}
		if strings.Contains(tail, "ANSWER") || strings.Contains(tail, "refs/heads") {
			t.Errorf("%s: the agent read the task set's repository:\n%s", file, tail)
		}
	}
}
