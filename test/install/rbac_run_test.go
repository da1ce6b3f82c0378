package install

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/freeaddr"
	"github.com/harnessfacts/harnessfacts/internal/testing/runsourcetest"
	"github.com/harnessfacts/harnessfacts/internal/testing/syncbuf"
)

// process is a binary the test started.
type process struct {
	name string
	cmd  *exec.Cmd
	out  syncbuf.Buffer
	done chan struct{}
	err  error
}

// impersonatingKubeconfig writes a kubeconfig that acts as user (with
// groups and extra) through the admin's credentials: what a pod's service
// account token amounts to, as far as RBAC and admission are concerned.
func impersonatingKubeconfig(t *testing.T, user string, groups []string, extra map[string][]string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
		a.ImpersonateGroups = groups
		a.ImpersonateUserExtra = extra
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// withArgs replaces the value of each --flag in args that over names, and
// appends the rest of over.
func withArgs(args []string, over map[string]string) []string {
	var out []string
	done := map[string]bool{}
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := over[name]; ok {
			out = append(out, name+"="+v)
			done[name] = true
			continue
		}
		out = append(out, a)
	}
	for name, v := range over {
		if !done[name] {
			out = append(out, name+"="+v)
		}
	}
	return out
}

// TestSampleRunsUnderChartRBAC runs the real controller and node-agent
// binaries with exactly the chart's permissions — each as its service
// account, the node-agent with the node claim a pod-bound token carries, the
// admission policy in force — and the arguments the chart gives them, and
// applies the sample HarnessRun. The run reaching Succeeded, with the
// node's HarnessNode and Lease written, shows the RBAC is enough; the rest of
// this package shows it is no more than that.
func TestSampleRunsUnderChartRBAC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the node-agent drops each agent to an unprivileged uid (run as root, as make test does in CI)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatalf("bwrap is not installed (make deps installs bubblewrap): %v", err)
	}
	t.Run("cluster-wide", func(t *testing.T) { sampleUnderChartRBAC(t, "rbacrun", "") })
	// The controller's Secret read, evidence ConfigMaps and Events granted
	// only in the runs' namespace.
	t.Run("runNamespaces", func(t *testing.T) {
		sampleUnderChartRBAC(t, "rbacns", "runNamespaces: [rbacns-runs]")
	})
}

func sampleUnderChartRBAC(t *testing.T, release, values string) {
	ctx := context.Background()
	namespace, node, runsNS := release+"-system", release+"-node", release+"-runs"
	m := mustRender(t, release, namespace, values)
	createNamespace(t, runsNS)
	createNamespace(t, namespace)
	access := m.only("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
	if _, err := runKubectl(access.yaml(t), "apply", "--server-side", "--field-manager=harnessfacts-install-test", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	// The Node the node-agent runs on (no kubelet here: made by hand).
	if err := k8s.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: map[string]string{"kubernetes.io/os": "linux"}}}); err != nil {
		t.Fatal(err)
	}
	// Gone when this test ends, so that no later controller binds a run to
	// a node whose node-agent has stopped.
	t.Cleanup(func() {
		_ = k8s.Delete(ctx, &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: node}})
		_ = k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}})
	})

	// The binaries, where the agent's unprivileged uid can execute them (the
	// node-agent runs its own `sandbox-init` inside the sandbox when
	// harnessfacts-sandbox-init is not beside it).
	dir, err := os.MkdirTemp("", "hf-rbacrun-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The controller's binary, and the node-agent image's entry point.
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/harnessfacts", "./cmd/harnessfacts-full", "./cmd/harnessfacts-node-agent")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/harnessfacts ./cmd/harnessfacts-full ./cmd/harnessfacts-node-agent: %v\n%s", err, out)
	}

	sa := func(name string) (string, []string) {
		return "system:serviceaccount:" + namespace + ":" + name,
			[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	}
	var procs []*process
	start := func(name string, args []string) *syncbuf.Buffer {
		bin := filepath.Join(dir, "harnessfacts")
		if name == "node-agent" {
			bin = filepath.Join(dir, "harnessfacts-node-agent")
		}
		p := &process{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
		p.cmd.Env = append(os.Environ(), "POD_NAMESPACE="+namespace, "NODE_NAME="+node)
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.err = p.cmd.Wait(); close(p.done) }()
		procs = append(procs, p)
		t.Cleanup(func() {
			_ = p.cmd.Process.Signal(os.Interrupt)
			select {
			case <-p.done:
			case <-time.After(20 * time.Second):
				_ = p.cmd.Process.Kill()
				<-p.done
			}
			if t.Failed() {
				t.Logf("%s output:\n%s", name, p.out.String())
			}
		})
		return &p.out
	}
	// A process that exits fails the wait at once, with its reason.
	alive := func() error {
		for _, p := range procs {
			select {
			case <-p.done:
				if p.err == nil {
					return fmt.Errorf("the %s exited with status 0", p.name)
				}
				return fmt.Errorf("the %s exited: %w", p.name, p.err)
			default:
			}
		}
		return nil
	}

	// The run source: the chart's certificate is made at install; here a
	// self-signed one, on a free port. The node-agent's token is a real
	// one of the chart's service account, bound to a Pod on the node (made
	// by hand: no kubelet here), for the run source's audience. The two
	// processes' metrics and health servers and the run source get their
	// addresses in one pick.
	addrs := freeaddr.Loopback(t, 5)
	secretPath, err := runsourcetest.ForBinaries(ctx, k8s, namespace, release+"-harnessfacts-node-agent", addrs[4], t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	source := map[string]string{}
	for i, a := range secretPath.ControllerArgs() {
		if i%2 == 0 {
			source[a] = secretPath.ControllerArgs()[i+1]
		}
	}
	controllerLink, err := secretPath.Flags(ctx, node, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	ctrlUser, ctrlGroups := sa(release + "-harnessfacts-controller")
	d := as[appsv1.Deployment](t, m.get(t, "Deployment", release+"-harnessfacts-controller"))
	ctrlOut := start("controller", withArgs(d.Spec.Template.Spec.Containers[0].Args, map[string]string{
		"--kubeconfig":                impersonatingKubeconfig(t, ctrlUser, ctrlGroups, nil),
		"--leader-election-namespace": namespace, // in a pod: the pod's namespace
		"--metrics-bind-address":      addrs[0],
		"--health-probe-bind-address": addrs[1],
		"--run-source-bind-address":   source["--run-source-bind-address"],
		"--run-source-cert-dir":       source["--run-source-cert-dir"],
	}))

	agentUser, agentGroups := sa(release + "-harnessfacts-node-agent")
	// In a pod the host name is the pod's name: the Events' reportingInstance
	// (harnessfacts-node-agent-<host name>) names the pod the token is bound to.
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	ds := as[appsv1.DaemonSet](t, m.get(t, "DaemonSet", release+"-harnessfacts-node-agent"))
	runRoot := filepath.Join(dir, "runs")
	// The chart's arguments as they are, --memory-limit and
	// --move-to-leaf-cgroup (default on) included: the node-agent moves into
	// <this test's cgroup>/agent with the chart's memory limit, as it does
	// in its container's cgroup (on cgroup v2 with every process of that
	// cgroup), and leaves it again when it is interrupted. It leaves the
	// host's fs.file-max as it is: raising it is the node-agent's own
	// (test/e2e), and a raise here would outlive the test and race that
	// test, which sets the table low and watches it.
	agentOut := start("node-agent", withArgs(ds.Spec.Template.Spec.Containers[0].Args, map[string]string{
		"--protect-kernel-defaults":   "true",
		"--kubeconfig":                impersonatingKubeconfig(t, agentUser, agentGroups, map[string][]string{nodeClaim: {node}, podClaim: {hostname}}),
		"--run-root":                  runRoot,
		"--controller-url":            controllerLink[1],
		"--controller-ca":             controllerLink[3],
		"--controller-token":          controllerLink[5],
		"--metrics-bind-address":      addrs[2],
		"--health-probe-bind-address": addrs[3],
	}))

	// The node registers: HarnessNode Ready, Lease in the node-agent's namespace.
	waitFor(t, 90*time.Second, "the HarnessNode "+node+" to be Ready", func() (bool, string) {
		if err := alive(); err != nil {
			t.Fatal(err)
		}
		n := &harnessv1.HarnessNode{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(n.Status.Conditions, harnessv1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", n.Status)
	})

	// The sample, as a user applies it.
	sample, err := os.ReadFile(filepath.Join(root, "config", "samples", "harnessrun_exec.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	samples, err := parseManifest(string(sample))
	if err != nil || len(samples) != 1 {
		t.Fatalf("config/samples/harnessrun_exec.yaml: %v", err)
	}
	samples[0].SetNamespace(runsNS)
	if _, err := runKubectl(samples.yaml(t), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	run := &harnessv1.HarnessRun{}
	waitFor(t, 120*time.Second, "the sample run to finish", func() (bool, string) {
		if err := alive(); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: runsNS, Name: samples[0].GetName()}, run); err != nil {
			return false, err.Error()
		}
		return run.Status.Phase.Terminal(), fmt.Sprintf("phase %s: %s", run.Status.Phase, run.Status.Message)
	})
	if run.Status.Phase != harnessv1.RunSucceeded || run.Status.NodeName != node {
		t.Errorf("the sample ended %s on node %q (%s), want Succeeded on %s", run.Status.Phase, run.Status.NodeName, run.Status.Message, node)
	}
	if run.Status.Evidence == nil || run.Status.Evidence.ConfigMapName == "" {
		t.Errorf("the sample has no evidence ConfigMap: %+v", run.Status.Evidence)
	} else if err := k8s.Get(ctx, client.ObjectKey{Namespace: run.Namespace, Name: run.Status.Evidence.ConfigMapName}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("the evidence ConfigMap the node-agent wrote: %v", err)
	}

	// A run with a credential and a fixture ConfigMap: the node-agent, which
	// may read neither, gets both from the controller's run source, which
	// reads them under the chart's RBAC (in runNamespaces only, when set).
	const credValue = "rbacrun-credential-5c2e"
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: runsNS, Name: "cred"}, StringData: map[string]string{"token": credValue}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: runsNS, Name: "fixture"}, Data: map[string]string{"fixture.yaml": "prompt: check the credential\n"}},
		&harnessv1.HarnessRun{ObjectMeta: metav1.ObjectMeta{Namespace: runsNS, Name: "with-secret"}, Spec: harnessv1.HarnessRunSpec{
			Agent: harnessv1.AgentSpec{Adapter: harnessv1.AdapterExec, Command: []string{"sh", "-c", `test "$RUN_TOKEN" = ` + credValue},
				Credentials: []harnessv1.Credential{{SecretKeyRef: harnessv1.SecretKeySelector{Name: "cred", Key: "token"}, Env: "RUN_TOKEN"}}},
			Fixture: harnessv1.FixtureSource{ConfigMapRef: &harnessv1.ConfigMapFixture{Name: "fixture"}},
		}},
	} {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	withSecret := &harnessv1.HarnessRun{}
	waitFor(t, 120*time.Second, "the run with a credential to finish", func() (bool, string) {
		if err := alive(); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: runsNS, Name: "with-secret"}, withSecret); err != nil {
			return false, err.Error()
		}
		return withSecret.Status.Phase.Terminal(), fmt.Sprintf("phase %s: %s", withSecret.Status.Phase, withSecret.Status.Message)
	})
	if withSecret.Status.Phase != harnessv1.RunSucceeded {
		t.Errorf("the run with a credential and a fixture ConfigMap ended %s (%s): %s", withSecret.Status.Phase, withSecret.Status.Reason, withSecret.Status.Message)
	}

	for name, out := range map[string]*syncbuf.Buffer{"controller": ctrlOut, "node-agent": agentOut} {
		if s := out.String(); strings.Contains(s, "forbidden") || strings.Contains(s, "denied request") {
			t.Errorf("the %s was refused something under the chart's RBAC and admission policy:\n%s", name, s)
		}
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, done func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := done()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, state)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
