//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// ghToken has GitHub's token format: the redactor's rules remove it.
const ghToken = "ghp_R2bX9kQ4mZ7tL1wV8nY3pC6sD0fG5hJ2aE4u"

// TestLogsFollowsALiveRun: `harnessfacts logs -f` prints a sandboxed
// agent's output while the agent still runs (the run is Running when the
// first lines arrive), redacted (a token in GitHub's format is gone) and
// inert (an OSC 52 clipboard write is shown as text), until the agent ends;
// then `logs` prints the stored output.log, the same text. The caller is
// authenticated by its kubeconfig's client certificate against the
// cluster's client CA.
func TestLogsFollowsALiveRun(t *testing.T) {
	ns := newNamespace(t, "e2e-logs")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	ctx := context.Background()
	script := `echo started; echo "token ` + ghToken + `"; printf 'clip \033]52;c;aGVsbG8=\007 end\n'; ` +
		`i=0; while [ $i -lt 12 ]; do i=$((i+1)); echo "tick $i"; sleep 0.5; done; echo finished-printing`
	if err := k8s.Create(ctx, execRun(ns, "live", "sh", "-c", script)); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "logs", "live", "-f", "--timeout=3m", "--kubeconfig", kubeconfig, "-n", ns)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var got []string
	checkedLive := false
	timeout := time.After(3 * time.Minute)
	for done := false; !done; {
		select {
		case l, ok := <-lines:
			if !ok {
				done = true
				break
			}
			got = append(got, l)
			if l == "tick 1" && !checkedLive {
				checkedLive = true
				run := &harnessv1.HarnessRun{}
				if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "live"}, run); err != nil {
					t.Fatal(err)
				}
				if run.Status.Phase != harnessv1.RunRunning {
					t.Errorf("the first ticks arrived when the run was %s, want Running: the output was not live", run.Status.Phase)
				}
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatalf("logs -f did not end; printed %q, stderr %s", got, stderr.String())
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("logs -f: %v\nstdout %q\nstderr %s", err, got, stderr.String())
	}
	if !checkedLive {
		t.Fatalf("logs -f never printed \"tick 1\": %q\nstderr %s", got, stderr.String())
	}
	live := strings.Join(got, "\n") + "\n"
	for _, want := range []string{"started\n", "token [REDACTED:github-pat]\n", "clip ^[]52;c;aGVsbG8=^G end\n", "tick 12\n", "finished-printing\n"} {
		if !strings.Contains(live, want) {
			t.Errorf("logs -f printed\n%s\nwant %q in it", live, want)
		}
	}
	if strings.Contains(live, ghToken) || strings.Contains(live, "\x1b") {
		t.Errorf("logs -f printed the token or a raw escape:\n%q", live)
	}
	if !strings.Contains(stderr.String(), "ended: phase Succeeded, verdict") {
		t.Errorf("logs -f did not say how the run ended: %s", stderr.String())
	}
	// After the end: the stored output, the same text.
	if stored := cli(t, ns, false, "logs", "live"); stored != live {
		t.Errorf("the stored output differs from what was followed live:\nstored %q\nlive   %q", stored, live)
	}
}

// TestLogsRefusesWhoMayNotRead: the node-agent serves a running run's output
// to a service account allowed get on harnessruns/log, and refuses one that
// may get the run but not its log (403, a SubjectAccessReview), a request
// without credentials and one with a token the API server does not accept
// (401, a TokenReview).
func TestLogsRefusesWhoMayNotRead(t *testing.T) {
	ns := newNamespace(t, "e2e-logs-authz")
	fixtureConfigMap(t, ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	ctx := context.Background()
	run := execRun(ns, "quiet", "sh", "-c", "echo visible-to-readers; sleep 120")
	if err := k8s.Create(ctx, run); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), run) })

	roles := map[string][]rbacv1.PolicyRule{
		"reader": {{APIGroups: []string{harnessv1.GroupVersion.Group}, Resources: []string{"harnessruns", "harnessruns/log"}, Verbs: []string{"get"}}},
		"nosy":   {{APIGroups: []string{harnessv1.GroupVersion.Group}, Resources: []string{"harnessruns"}, Verbs: []string{"get", "list"}}},
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for name, rules := range roles {
		for _, o := range []client.Object{
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}},
		} {
			if err := k8s.Create(ctx, o); err != nil {
				t.Fatal(err)
			}
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = tr.Status.Token
	}

	// Running, with the agent's line served.
	var lo *harnessv1.LiveOutput
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cur := &harnessv1.HarnessRun{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(run), cur); err != nil {
			t.Fatal(err)
		}
		if cur.Status.Phase == harnessv1.RunRunning && cur.Status.LiveOutput != nil {
			lo = cur.Status.LiveOutput
			if out, err := exec.Command(binary, "logs", "quiet", "--kubeconfig", tokenKubeconfig(t, tokens["reader"]), "-n", ns).CombinedOutput(); err == nil && strings.Contains(string(out), "visible-to-readers") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run never served its output to the reader: %+v", cur.Status)
		}
		time.Sleep(500 * time.Millisecond)
	}

	out, err := exec.Command(binary, "logs", "quiet", "-f", "--timeout=1m", "--kubeconfig", tokenKubeconfig(t, tokens["nosy"]), "-n", ns).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "403") || !strings.Contains(string(out), "may not get harnessruns/log") || strings.Contains(string(out), "visible-to-readers") {
		t.Errorf("a user without get on harnessruns/log: error %v, output\n%s\nwant a 403 refusal and none of the output", err, out)
	}

	// Straight to the node-agent, as anyone on the network could.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a test of the server's refusals
	for name, auth := range map[string]string{"no credentials": "", "a token the API server does not accept": "Bearer not-a-token", "a basic password": "Basic YWRtaW46YWRtaW4="} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, lo.URL+"?follow=true", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || strings.Contains(string(body), "visible-to-readers") {
			t.Errorf("%s: %s %q, want 401 and none of the output", name, resp.Status, body)
		}
	}
}

// tokenKubeconfig writes a kubeconfig for the test's API server that
// authenticates with token.
func tokenKubeconfig(t *testing.T, token string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user"}
	cfg.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(path, 0o600)
	return path
}

// TestLocalRunShowsPhasesAndLiveOutput: `harnessfacts run --follow` says
// each step on stderr as it begins and shows the agent's output while the
// agent runs. The agent waits for a file the test puts into its workspace
// only after it saw the agent's first line on stderr: without live output
// the run could not end with got-go (it would time out instead).
func TestLocalRunShowsPhasesAndLiveOutput(t *testing.T) {
	cwd := openDir(t)
	runs := filepath.Join(openDir(t), "runs")
	runFile := filepath.Join(cwd, "run.yaml")
	script := `echo waiting-for-go; echo "token ` + ghToken + `"; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; [ -e go ] && echo got-go`
	runYAML := `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata:
  name: follow
spec:
  agent:
    adapter: exec
    command: [sh, -c, ` + quoteYAML(script) + `]
  fixture:
    configMapRef:
      name: hello
`
	if err := os.WriteFile(runFile, []byte(runYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "run", "-f", runFile, "--follow", "--fixtures", filepath.Join(testenv.RepoRoot(), "fixtures"), "--run-root", runs)
	cmd.Dir = cwd
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var said []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		l := sc.Text()
		said = append(said, l)
		if l == "| waiting-for-go" { // the agent's lines are shown behind "| "
			ws, _ := filepath.Glob(filepath.Join(runs, "harnessfacts-*", "workspace")) // this run's alone: the root is the test's
			if len(ws) != 1 {
				t.Errorf("the run's workspace: %v", ws)
				continue
			}
			if err := os.WriteFile(filepath.Join(ws[0], "go"), nil, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	// hello's checks want the greeting this agent does not write: the
	// verdict is Fail and the exit code 1, which is not what is tested.
	_ = cmd.Wait()
	all := strings.Join(said, "\n")
	for _, want := range []string{
		"HarnessRun follow: Running", "HarnessRun follow: fixture", "HarnessRun follow: agent",
		"HarnessRun follow: the agent started in bwrap", "----- follow: the agent's output (redacted) -----",
		"waiting-for-go", "token [REDACTED:github-pat]", "got-go", "----- follow: end of the agent's output -----",
		"HarnessRun follow: checks", "HarnessRun follow: Succeeded, verdict",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("stderr of harnessfacts run --follow lacks %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, ghToken) {
		t.Errorf("the live output showed the token:\n%s", all)
	}
	if strings.Index(all, "got-go") > strings.Index(all, "HarnessRun follow: checks") {
		t.Errorf("the steps are out of order:\n%s", all)
	}
}
