// Package metrics scrapes the controller's and a node-agent's metrics
// endpoints as Prometheus would: the real `harnessfacts controller` and
// `harnessfacts node-agent` processes against a real API server, a suite and
// a run executed in bubblewrap, HTTPS with a service account's token checked
// by TokenReview and SubjectAccessReview.
package metrics

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	hftesting "github.com/harnessfacts/harnessfacts/internal/testing"
	"github.com/harnessfacts/harnessfacts/internal/testing/freeaddr"
	"github.com/harnessfacts/harnessfacts/internal/testing/runsourcetest"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

// start runs the binary with args until the test ends; its output goes to
// the test log on failure.
func start(t *testing.T, binary string, args ...string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	logFile, err := os.Create(filepath.Join(t.TempDir(), args[0]+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("%s log:\n%s", args[0], tail(string(b), 40))
		}
	})
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// scrape GETs https://addr/metrics with token (none when empty).
func scrape(addr, token string) (int, string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// The endpoint's certificate is self-signed, as with kubebuilder's
		// defaults; Prometheus is configured the same way.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // a self-signed test endpoint on loopback
	}}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// value is the sample of series (name and exact label set as printed, e.g.
// `x{a="b"}`), or -1 when absent.
func value(body, series string) float64 {
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}

// documented reads the series of docs/metrics.md's table, by endpoint.
func documented(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| (controller|node-agent) \\| `(harnessfacts_[a-z_]+)` \\|")
	out := map[string][]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			out[m[1]] = append(out[m[1]], m[2])
		}
	}
	if len(out["controller"]) < 5 || len(out["node-agent"]) < 5 {
		t.Fatalf("docs/metrics.md documents too few series: %v", out)
	}
	return out
}

func TestMetricsEndpoints(t *testing.T) {
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("bwrap is not installed: run `make test`, which installs Debian's bubblewrap package")
	}
	tmp, err := os.MkdirTemp("", "hf-metrics-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	// The sandboxed agent's user must reach the binary and its run dir.
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	// The controller's binary, and the node-agent image's entry point.
	binary, nodeAgent := filepath.Join(tmp, "harnessfacts"), filepath.Join(tmp, "harnessfacts-node-agent")
	build := exec.Command("go", "build", "-o", tmp+"/", "./cmd/harnessfacts", "./cmd/harnessfacts-full", "./cmd/harnessfacts-node-agent")
	build.Dir = testenv.RepoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as make build and the images
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building harnessfacts: %v\n%s", err, out)
	}
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig := filepath.Join(tmp, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k8s, err := client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	const system, ns = "hf-system", "evals"
	for _, n := range []string{system, ns} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}

	addrs := freeaddr.Loopback(t, 3)
	ctlAddr, nodeAddr := addrs[0], addrs[1]
	secretPath, err := runsourcetest.ForBinaries(ctx, k8s, system, "", addrs[2], t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	controllerFlags, err := secretPath.Flags(ctx, "metrics-node", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	start(t, binary, append([]string{"controller", "--kubeconfig", kubeconfig, "--leader-elect=false", "--node-lease-namespace", system,
		"--metrics-bind-address", ctlAddr, "--health-probe-bind-address", "0"}, secretPath.ControllerArgs()...)...)
	start(t, nodeAgent, append([]string{"node-agent", "--kubeconfig", kubeconfig, "--node-name", "metrics-node", "--lease-namespace", system,
		"--run-root", filepath.Join(tmp, "runs"), "--cgroup-mount", filepath.Join(tmp, "cgroup"), "--slots", "2",
		"--metrics-bind-address", nodeAddr, "--health-probe-bind-address", "0",
		"--logs-bind-address", "127.0.0.1:0", "--logs-advertise-host", "127.0.0.1", "--protect-kernel-defaults"}, controllerFlags...)...)

	// Prometheus' service account, bound to the chart's metrics-reader
	// rule, and one that is not.
	promToken, nosyToken, err := hftesting.MetricsReaders(ctx, k8s, env.Config, ns, "metrics-reader", "prometheus", "nosy")
	if err != nil {
		t.Fatal(err)
	}

	// Wait for both endpoints and the node.
	for _, addr := range []string{ctlAddr, nodeAddr} {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			code, _, err := scrape(addr, promToken)
			if err == nil && code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("metrics endpoint %s never answered 200: %d %v", addr, code, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// Refused: no token (401), a token without the right (403), plain HTTP.
	for name, tc := range map[string]struct {
		token string
		want  int
	}{"no token": {"", http.StatusUnauthorized}, "no RBAC": {nosyToken, http.StatusForbidden}} {
		for _, addr := range []string{ctlAddr, nodeAddr} {
			code, body, err := scrape(addr, tc.token)
			if err != nil || code != tc.want || strings.Contains(body, "harnessfacts_") {
				t.Errorf("%s at %s: %d %v, want %d and no series", name, addr, code, err, tc.want)
			}
		}
	}
	if resp, err := http.Get("http://" + ctlAddr + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if strings.Contains(string(b), "harnessfacts_") {
			t.Error("the controller serves its metrics over plain HTTP")
		}
	}

	cm, err := hftesting.FixtureConfigMap(ns, "fixture-hello", filepath.Join(testenv.RepoRoot(), "fixtures", "hello"))
	if err != nil {
		t.Fatal(err)
	}
	cm.Labels = map[string]string{harnessv1.LabelFixture: "true"}
	agent := harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"sh", "../fixture/agent.sh"}}
	slow := &harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Name: "slow", Namespace: ns},
		Spec: harnessv1.HarnessRunSpec{Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"sh", "-c", "sleep 600"}},
			Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture-hello"}}}}
	suite := &harnessv1.HarnessSuite{ObjectMeta: metav1.ObjectMeta{Name: "nightly", Namespace: ns},
		Spec: harnessv1.HarnessSuiteSpec{Agents: []harnessv1.SuiteAgent{{Name: "script", Agent: agent}},
			Fixtures: harnessv1.SuiteFixtures{Names: []string{"fixture-hello"}}, Repeats: 1, Parallelism: 1, Revision: intstr.FromString("1")}}
	for _, o := range []client.Object{cm, slow, suite} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	// During the run: one run in flight on the node, one Running for the
	// controller.
	eventually(t, 2*time.Minute, func() error {
		_, node, err := scrape(nodeAddr, promToken)
		if err != nil {
			return err
		}
		if v := value(node, "harnessfacts_node_runs_in_flight"); v < 1 {
			return fmt.Errorf("harnessfacts_node_runs_in_flight %v", v)
		}
		_, ctl, err := scrape(ctlAddr, promToken)
		if err != nil {
			return err
		}
		if v := value(ctl, `harnessfacts_harnessruns{phase="Running"}`); v < 1 {
			return fmt.Errorf(`harnessfacts_harnessruns{phase="Running"} %v`, v)
		}
		return nil
	})
	// The suite's run passes; then the slow run is cancelled.
	eventually(t, 3*time.Minute, func() error {
		_, ctl, err := scrape(ctlAddr, promToken)
		if err != nil {
			return err
		}
		if v := value(ctl, `harnessfacts_suite_runs{namespace="evals",state="passed",suite="nightly"}`); v != 1 {
			return fmt.Errorf("the suite's passed runs: %v\n%s", v, grep(ctl, "harnessfacts_suite_runs"))
		}
		return nil
	})
	base := slow.DeepCopy()
	slow.Spec.Cancel = true
	if err := k8s.Patch(ctx, slow, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	var ctl, node string
	eventually(t, 2*time.Minute, func() error {
		_, ctl, _ = scrape(ctlAddr, promToken)
		_, node, _ = scrape(nodeAddr, promToken)
		if v := value(ctl, `harnessfacts_runs_finished_total{adapter="exec",failure_class="None",verdict="Pass"}`); v != 1 {
			return fmt.Errorf("runs finished with Pass: %v\n%s", v, grep(ctl, "harnessfacts_runs_finished_total"))
		}
		if v := value(ctl, `harnessfacts_run_queue_wait_seconds_count{adapter="exec"}`); v != 2 {
			return fmt.Errorf("queue waits observed: %v", v)
		}
		if v := value(node, "harnessfacts_node_runs_in_flight"); v != 0 {
			return fmt.Errorf("runs in flight after both ended: %v", v)
		}
		if v := value(node, `harnessfacts_node_mcp_calls_total{transport="HTTP"}`); v < 1 {
			return fmt.Errorf("MCP calls: %v\n%s", v, grep(node, "harnessfacts_node"))
		}
		return nil
	})
	if v := value(node, `harnessfacts_node_runs_finished_total{reason="Cancelled",verdict="Error"}`); v != 1 {
		t.Errorf("the node's cancelled runs: %v\n%s", v, grep(node, "harnessfacts_node_runs_finished_total"))
	}
	for endpoint, series := range documented(t) {
		body := ctl
		if endpoint == "node-agent" {
			body = node
		}
		for _, s := range series {
			if !regexp.MustCompile(`(?m)^` + s + `(_bucket|_count|_sum)?[{ ]`).MatchString(body) {
				t.Errorf("the %s endpoint lacks the documented series %s", endpoint, s)
			}
		}
	}
}

func grep(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func eventually(t *testing.T, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
