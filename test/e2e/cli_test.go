//go:build linux

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// cli runs the harnessfacts binary as a user would, with a kubeconfig for
// the test's API server and -n ns, and returns its output; it fails the test
// when the command fails and wantErr is false.
func cli(t *testing.T, ns string, wantErr bool, args ...string) string {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	full := append(append([]string{}, args...), "--kubeconfig", kubeconfig, "-n", ns)
	out, err := exec.Command(binary, full...).CombinedOutput()
	if (err != nil) != wantErr {
		t.Fatalf("harnessfacts %s: error %v (want error: %t)\n%s", strings.Join(args, " "), err, wantErr, out)
	}
	return string(out)
}

func execRun(ns, name string, command ...string) *harnessv1.HarnessRun {
	return &harnessv1.HarnessRun{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"team": "evals"}},
		Spec: harnessv1.HarnessRunSpec{
			Agent:   harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: command},
			Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-hello"}},
		},
	}
}

// TestCLIWaitsForPassAndFail: `harnessfacts wait` (the Finished condition)
// returns for a run that passes and for one that fails, through the real
// controller and node-agent in bwrap; then get, describe, evidence export
// and retry work on them as a kubectl user expects.
func TestCLIWaitsForPassAndFail(t *testing.T) {
	ns := newNamespace(t, "e2e-cli")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	ctx := context.Background()
	pass := execRun(ns, "passes", "sh", "../fixture/agent.sh")
	fail := execRun(ns, "fails", "sh", "-c", "echo not doing it")
	for _, r := range []*harnessv1.HarnessRun{pass, fail} {
		if err := k8s.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	out := cli(t, ns, false, "wait", "passes", "fails", "--for=condition=Finished", "--timeout=3m")
	for _, want := range []string{
		"harnessrun.harnessfacts.io/passes condition met: Finished=True (phase Succeeded, verdict Pass)",
		"harnessrun.harnessfacts.io/fails condition met: Finished=True (phase Succeeded, verdict Fail)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("harnessfacts wait printed\n%s\nwant a line %q", out, want)
		}
	}
	for name, verdict := range map[string]string{"passes": "Pass", "fails": "Fail"} {
		run := &harnessv1.HarnessRun{}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionFinished); c == nil || c.Status != metav1.ConditionTrue || c.Reason != verdict {
			t.Errorf("run %s: Finished %+v, want True with reason %s", name, c, verdict)
		}
	}
	// kubectl's own wait understands the condition too.
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command(filepath.Join(env.Assets, "kubectl"), "--kubeconfig", kubeconfig, "-n", ns, "wait",
		"--for=condition=Finished", "--timeout=30s", "hfrun/passes", "hfrun/fails").CombinedOutput(); err != nil {
		t.Errorf("kubectl wait --for=condition=Finished: %v\n%s", err, o)
	}

	// get: the server's table (the CRD's columns), wide, name, jsonpath.
	out = cli(t, ns, false, "get")
	if !strings.Contains(out, "NAME") || !strings.Contains(out, "VERDICT") || !strings.Contains(out, "passes") || !strings.Contains(out, "Fail") {
		t.Errorf("harnessfacts get:\n%s", out)
	}
	out = cli(t, ns, false, "get", "passes", "-o", "wide")
	if !strings.Contains(out, "EVIDENCE") || !strings.Contains(out, "sha256:") {
		t.Errorf("harnessfacts get -o wide lacks the evidence digest:\n%s", out)
	}
	if out = cli(t, ns, false, "get", "-o", "name", "-l", "team=evals"); strings.TrimSpace(out) != "harnessrun.harnessfacts.io/fails\nharnessrun.harnessfacts.io/passes" {
		t.Errorf("harnessfacts get -o name:\n%s", out)
	}
	if out = cli(t, ns, false, "get", "passes", "-o", "jsonpath={.status.verdict}"); out != "Pass" {
		t.Errorf("harnessfacts get -o jsonpath: %q", out)
	}
	if out = cli(t, ns, false, "get", "fails", "-o", "yaml"); !strings.Contains(out, "kind: HarnessRun") || !strings.Contains(out, "verdict: Fail") {
		t.Errorf("harnessfacts get -o yaml:\n%s", out)
	}
	cli(t, ns, true, "get", "no-such-run")

	// describe: the story in words.
	out = cli(t, ns, false, "describe", "fails")
	for _, want := range []string{"Verdict:", "Fail, failure class Check", "Finished", "Checks:", "greeting-edited", "FAILED", "Events:"} {
		if !strings.Contains(out, want) {
			t.Errorf("harnessfacts describe lacks %q:\n%s", want, out)
		}
	}

	// logs: the stored, redacted output of a finished run.
	if out = cli(t, ns, false, "logs", "fails"); !strings.Contains(out, "not doing it") {
		t.Errorf("harnessfacts logs fails:\n%s", out)
	}

	// evidence export: the ConfigMap's evidence as a folder that verifies
	// offline.
	dir := filepath.Join(t.TempDir(), "exported")
	out = cli(t, ns, false, "evidence", "export", "passes", dir)
	if !strings.Contains(out, "verified") {
		t.Errorf("harnessfacts evidence export:\n%s", out)
	}
	for _, f := range []string{"receipt.json", "receipt.sha256", "output.log", "artifacts/greeting.txt", "artifacts/token.txt"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("the export lacks %s: %v", f, err)
		}
	}
	if o, err := exec.Command(binary, "evidence", "verify", dir).CombinedOutput(); err != nil {
		t.Errorf("harnessfacts evidence verify of the export: %v\n%s", err, o)
	}
	// A second export into the same folder overwrites nothing.
	cli(t, ns, true, "evidence", "export", "passes", dir)

	// retry: a new run, same spec, linked to the old one.
	out = cli(t, ns, false, "retry", "fails")
	if !strings.Contains(out, "(a retry of fails)") {
		t.Fatalf("harnessfacts retry:\n%s", out)
	}
	retries := &harnessv1.HarnessRunList{}
	if err := k8s.List(ctx, retries, client.InNamespace(ns), client.MatchingLabels{harnessv1.LabelRetryOf: "fails"}); err != nil {
		t.Fatal(err)
	}
	if len(retries.Items) != 1 {
		t.Fatalf("%d runs labelled as retries of fails, want 1", len(retries.Items))
	}
	r := retries.Items[0]
	oldRun := &harnessv1.HarnessRun{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "fails"}, oldRun); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Name, "fails-") || r.Annotations[harnessv1.AnnotationRetryOfUID] != string(oldRun.UID) ||
		r.Labels["team"] != "evals" || strings.Join(r.Spec.Agent.Command, " ") != strings.Join(oldRun.Spec.Agent.Command, " ") {
		t.Errorf("retry %s: labels %v annotations %v command %v", r.Name, r.Labels, r.Annotations, r.Spec.Agent.Command)
	}
	if out = cli(t, ns, false, "wait", r.Name, "--timeout=3m"); !strings.Contains(out, "verdict Fail") {
		t.Errorf("waiting for the retry:\n%s", out)
	}

	// logs prints a stored output only if it is the run's: the evidence
	// ConfigMap is the namespace's to edit, the digest in status only the
	// node-agent's to write.
	cm := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: oldRun.Status.Evidence.ConfigMapName}, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["output.log"] = "tests: all 3 passed\n"
	if err := k8s.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if out = cli(t, ns, true, "logs", "fails"); strings.Contains(out, "all 3 passed") || !strings.Contains(out, "does not match") {
		t.Errorf("harnessfacts logs of a run whose stored output was changed:\n%s", out)
	}
}

// TestCLICancel: `harnessfacts cancel` stops a running sandboxed agent; the
// run ends Cancelled and `wait` returns. A wait that times out says so.
func TestCLICancel(t *testing.T) {
	ns := newNamespace(t, "e2e-cancel")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	ctx := context.Background()
	run := execRun(ns, "sleeper", "sh", "-c", "echo started; sleep 600")
	if err := k8s.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	cli(t, ns, false, "wait", "sleeper", "--for=condition=Finished=False", "--timeout=1m")
	deadline := time.Now().Add(time.Minute)
	for {
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(run), run); err != nil {
			t.Fatal(err)
		}
		if run.Status.Phase == harnessv1.RunRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never started: %+v", run.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out := cli(t, ns, true, "wait", "sleeper", "--timeout=2s"); !strings.Contains(out, "timed out after 2s waiting for condition Finished=True") {
		t.Errorf("a wait that times out:\n%s", out)
	}
	// Without -f, logs of a running run prints what its node-agent kept so
	// far and says it still runs; with -f it follows the output live until
	// the agent ends (here: cancelled), then says how the run ended.
	if out := cli(t, ns, false, "logs", "sleeper"); !strings.Contains(out, "started\n") || !strings.Contains(out, "is still running: -f follows its output") {
		t.Errorf("harnessfacts logs of a running run:\n%s", out)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	follow := exec.Command(binary, "logs", "sleeper", "-f", "--timeout=2m", "--kubeconfig", kubeconfig, "-n", ns)
	var followOut strings.Builder
	follow.Stdout, follow.Stderr = &followOut, &followOut
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	if out := cli(t, ns, false, "cancel", "sleeper"); !strings.Contains(out, "harnessrun.harnessfacts.io/sleeper cancel requested") {
		t.Errorf("harnessfacts cancel:\n%s", out)
	}
	out := cli(t, ns, false, "wait", "sleeper", "--timeout=2m")
	// The node-agent judges a stopped agent's run Error (it was not let
	// finish); status.reason says why.
	if !strings.Contains(out, "condition met: Finished=True (phase Failed, verdict Error)") {
		t.Errorf("waiting for the cancelled run:\n%s", out)
	}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(run), run); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(run.Status.Conditions, harnessv1.ConditionFinished); c == nil || c.Reason != "Error" || run.Status.Reason != harnessv1.ReasonCancelled {
		t.Errorf("cancelled run: reason %q, Finished %+v; want reason Cancelled, Finished for verdict Error", run.Status.Reason, c)
	}
	// spec.cancel made a new generation; the terminal write observed it.
	if run.Generation < 2 || run.Status.ObservedGeneration != run.Generation {
		t.Errorf("cancelled run: generation %d, status.observedGeneration %d; want the cancel's generation observed", run.Generation, run.Status.ObservedGeneration)
	}
	if err := follow.Wait(); err != nil || !strings.Contains(followOut.String(), "started\n") || !strings.Contains(followOut.String(), "ended: phase Failed, verdict Error") {
		t.Errorf("harnessfacts logs -f of the cancelled run: %v\n%s", err, followOut.String())
	}
	if out := cli(t, ns, false, "cancel", "sleeper"); !strings.Contains(out, "already finished") {
		t.Errorf("cancelling a finished run:\n%s", out)
	}
	waitNoRunDirs(t)
}

// TestLogsFollowStopsWhenTheRunIsMadeAgain: `logs -f` looks the run up by
// name as it waits; a run deleted and made again under that name meanwhile
// is another run, and the command stops rather than follow it as the one
// asked for.
func TestLogsFollowStopsWhenTheRunIsMadeAgain(t *testing.T) {
	ns := newNamespace(t, "e2e-logs-again")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	ctx := context.Background()
	pending := func() *harnessv1.HarnessRun {
		run := execRun(ns, "waits", "true")
		run.Spec.NodeSelector = map[string]string{"harnessfacts.io/e2e": "no-such-node"} // stays Pending
		return run
	}
	run := pending()
	if err := k8s.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	follow := exec.Command(binary, "logs", "waits", "-f", "--timeout=1m", "--kubeconfig", kubeconfig, "-n", ns)
	var out strings.Builder
	follow.Stdout, follow.Stderr = &out, &out
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // it waits for the run to start
	if err := k8s.Delete(ctx, run); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := k8s.Create(ctx, pending()); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("making the run again: %v", err)
		}
	}
	err := follow.Wait()
	// Its look between the delete and the create may find no run at all;
	// either way it stops, never following the new run for the old.
	if err == nil || !strings.Contains(out.String(), "was deleted and made again") && !strings.Contains(out.String(), "not found") {
		t.Errorf("logs -f of a run made again under its name: %v\n%s", err, out.String())
	}
}

// TestLocalRunTwiceKeepsBothEvidence: re-running is normal. Each
// `harnessfacts run` writes its own folder evidence/NAME/<time>, the link
// evidence/NAME/latest points at the newest, and `evidence verify` takes the
// run's folder, the link or a time's folder.
func TestLocalRunTwiceKeepsBothEvidence(t *testing.T) {
	cwd := openDir(t)
	runs := filepath.Join(openDir(t), "runs")
	for range 2 {
		cmd := exec.Command(binary, "run", "-f", filepath.Join(testenv.RepoRoot(), "fixtures", "hello", "run.yaml"), "--run-root", runs)
		cmd.Dir = cwd
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("harnessfacts run: %v\n%s", err, out)
		}
	}
	runDir := filepath.Join(cwd, "evidence", "hello")
	entries, err := os.ReadDir(runDir)
	if err != nil {
		t.Fatal(err)
	}
	var folders []string
	for _, e := range entries {
		if e.IsDir() {
			folders = append(folders, e.Name())
		}
	}
	if len(folders) != 2 {
		t.Fatalf("evidence/hello holds %v, want two runs' folders and latest", entries)
	}
	latest, err := os.Readlink(filepath.Join(runDir, "latest"))
	if err != nil || latest != folders[1] {
		t.Errorf("latest points at %q (%v), want the newer folder %s", latest, err, folders[1])
	}
	for _, dir := range []string{runDir, filepath.Join(runDir, "latest"), filepath.Join(runDir, folders[0])} {
		if out, err := exec.Command(binary, "evidence", "verify", dir).CombinedOutput(); err != nil {
			t.Errorf("harnessfacts evidence verify %s: %v\n%s", dir, err, out)
		}
	}
}

// TestVerifySaysWhatTheReceiptIsAbout: a valid receipt of another run or
// fixture is still valid, so `evidence verify` says what it records (the
// fixture's and spec's digests, the checks' results, the agent's end), and
// --fixture-digest and --spec-digest fail it unless it names those.
func TestVerifySaysWhatTheReceiptIsAbout(t *testing.T) {
	dir := filepath.Join(openDir(t), "evidence")
	hello := filepath.Join(testenv.RepoRoot(), "fixtures", "hello")
	if out, err := exec.Command(binary, "run", "-f", filepath.Join(hello, "run.yaml"), "--run-root", filepath.Join(openDir(t), "runs"), "--evidence", dir).CombinedOutput(); err != nil {
		t.Fatalf("harnessfacts run: %v\n%s", err, out)
	}
	digest, err := exec.Command(binary, "fixture", "digest", hello).Output()
	if err != nil {
		t.Fatal(err)
	}
	fixtureDigest := strings.TrimSpace(string(digest))
	out, err := exec.Command(binary, "evidence", "verify", dir, "--fixture-digest", fixtureDigest).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "fixture "+fixtureDigest+", spec sha256:") ||
		!strings.Contains(string(out), "2 of 2 checks passed; the agent exited with code 0; MCP token seen") {
		t.Errorf("verify pinned to the right fixture: %v\n%s", err, out)
	}
	other := "sha256:" + strings.Repeat("0", 64)
	for _, flag := range []string{"--fixture-digest", "--spec-digest"} {
		out, err = exec.Command(binary, "evidence", "verify", dir, flag, other).CombinedOutput()
		if err == nil || !strings.Contains(string(out), ", not "+other) || strings.Contains(string(out), "verified ") {
			t.Errorf("verify %s %s: %v\n%s; want a refusal, without \"verified\" before it", flag, other, err, out)
		}
	}
}

// TestCLIAsAKubectlPlugin: linked as kubectl-harnessfacts on PATH, the
// binary is a plugin of the project's kubectl (`kubectl plugin list` finds
// it, `kubectl harnessfacts ...` runs it). cli-runtime's flags work as with
// kubectl: $KUBECONFIG, --context picks a context other than the current
// one (whose server does not answer) and the context's namespace stands in
// for -n; -o name|yaml|json|jsonpath prints what wait, retry and cancel
// acted on, so scripts need no parsing of sentences.
func TestCLIAsAKubectlPlugin(t *testing.T) {
	ns := newNamespace(t, "e2e-plugin")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	ctx := context.Background()
	if err := k8s.Create(ctx, execRun(ns, "quick", "sh", "../fixture/agent.sh")); err != nil {
		t.Fatal(err)
	}

	// A kubeconfig whose current context names a server that does not
	// answer, and a context "evals" for the test's API server and ns.
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cur := cfg.Contexts[cfg.CurrentContext]
	cfg.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.Contexts["nowhere"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: cur.AuthInfo, Namespace: ns}
	cfg.Contexts["evals"] = &clientcmdapi.Context{Cluster: cur.Cluster, AuthInfo: cur.AuthInfo, Namespace: ns}
	cfg.CurrentContext = "nowhere"
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(bin, "kubectl-harnessfacts")); err != nil {
		t.Fatal(err)
	}
	kubectl := func(wantErr bool, args ...string) string {
		t.Helper()
		cmd := exec.Command(filepath.Join(env.Assets, "kubectl"), args...)
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if (err != nil) != wantErr {
			t.Fatalf("kubectl %s: error %v (want error: %t)\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, wantErr, stdout.String(), stderr.String())
		}
		return stdout.String() + stderr.String()
	}

	if out := kubectl(false, "plugin", "list"); !strings.Contains(out, filepath.Join(bin, "kubectl-harnessfacts")) {
		t.Errorf("kubectl plugin list does not find the plugin:\n%s", out)
	}
	// The current context's server does not answer: --context matters.
	if out := kubectl(true, "harnessfacts", "get", "quick"); !strings.Contains(out, "127.0.0.1:1") {
		t.Errorf("harnessfacts get in the current context should fail on its server:\n%s", out)
	}
	if out := kubectl(false, "harnessfacts", "wait", "quick", "--context", "evals", "--timeout=3m", "-o", "name"); strings.TrimSpace(out) != "harnessrun.harnessfacts.io/quick" {
		t.Errorf("kubectl harnessfacts wait -o name: %q", out)
	}
	if out := kubectl(false, "harnessfacts", "get", "quick", "--context", "evals", "-o", "jsonpath={.status.verdict}"); out != "Pass" {
		t.Errorf("kubectl harnessfacts get -o jsonpath: %q", out)
	}
	// -n wins over the context's namespace, as with kubectl.
	if out := kubectl(true, "harnessfacts", "get", "quick", "--context", "evals", "-n", "default"); !strings.Contains(out, "HarnessRun default/quick") || !strings.Contains(out, "could not find") {
		t.Errorf("kubectl harnessfacts get -n default:\n%s", out)
	}

	// retry -o name prints only the new run's name; cancel and wait -o
	// print what they acted on.
	out := strings.TrimSpace(kubectl(false, "harnessfacts", "retry", "quick", "--context", "evals", "-o", "name"))
	retry, ok := strings.CutPrefix(out, "harnessrun.harnessfacts.io/quick-")
	if !ok || strings.Contains(out, "\n") {
		t.Fatalf("kubectl harnessfacts retry -o name: %q", out)
	}
	retry = "quick-" + retry
	if out := kubectl(false, "harnessfacts", "wait", retry, "--context", "evals", "--timeout=3m", "-o", "jsonpath={.status.verdict}"); out != "Pass" {
		t.Errorf("kubectl harnessfacts wait -o jsonpath={.status.verdict} of the retry: %q", out)
	}
	// Cancelled: a run that cannot end before the cancel reaches it (a
	// retry of quick could finish first and end Completed).
	if err := k8s.Create(ctx, execRun(ns, "slow", "sleep", "600")); err != nil {
		t.Fatal(err)
	}
	if out := kubectl(false, "harnessfacts", "cancel", "slow", "--context", "evals", "-o", "json"); !strings.Contains(out, `"cancel": true`) || !strings.Contains(out, `"name": "slow"`) {
		t.Errorf("kubectl harnessfacts cancel -o json:\n%s", out)
	}
	if out := kubectl(false, "harnessfacts", "wait", "slow", "--context", "evals", "--timeout=3m", "-o", "jsonpath={.status.reason}"); out != harnessv1.ReasonCancelled {
		t.Errorf("kubectl harnessfacts wait -o jsonpath={.status.reason} of the cancelled run: %q", out)
	}
	if out := kubectl(false, "harnessfacts", "wait", "quick", "--context", "evals", "-o", "yaml"); !strings.Contains(out, "kind: HarnessRun") || !strings.Contains(out, "verdict: Pass") {
		t.Errorf("kubectl harnessfacts wait -o yaml:\n%s", out)
	}
	// A wrong -o changes nothing: no second retry is made.
	if out := kubectl(true, "harnessfacts", "retry", "quick", "--context", "evals", "-o", "wide"); !strings.Contains(out, "-o wide") {
		t.Errorf("kubectl harnessfacts retry -o wide:\n%s", out)
	}
	retries := &harnessv1.HarnessRunList{}
	if err := k8s.List(ctx, retries, client.InNamespace(ns), client.MatchingLabels{harnessv1.LabelRetryOf: "quick"}); err != nil {
		t.Fatal(err)
	}
	if len(retries.Items) != 1 {
		t.Errorf("%d retries of quick, want 1 (a refused -o must not create one)", len(retries.Items))
	}
	waitNoRunDirs(t)
}
