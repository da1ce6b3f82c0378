//go:build node

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

const (
	ns      = "harnessfacts-system"
	release = "harnessfacts"
	// runRoot is the chart's default nodeAgent.runRoot, a host directory.
	runRoot = "/var/lib/harnessfacts/runs"
)

// hostAgents is where `make agent-clis` installs the CLIs on the host; the
// chart mounts it with nodeAgent.agentRuntimes.hostPath.
const hostAgents = "/opt/harnessfacts/agents"

// values writes the values a user of this cluster sets: the images (built
// here, imported into containerd), the API server's address (this cluster
// runs no kube-proxy, so the kubernetes Service's ClusterIP does not route;
// clusters with a kube-proxy replacement set the same), the node mode, and
// the host's agent CLIs when they are installed.
func values(t *testing.T, privileged bool, extra map[string]any) string {
	t.Helper()
	apiEnv := []map[string]string{
		{"name": "KUBERNETES_SERVICE_HOST", "value": nodeEnv["HARNESSFACTS_NODE_IP"]},
		{"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
	}
	repo, tagOf := func(ref string) string { return ref[:strings.LastIndex(ref, ":")] }, func(ref string) string { return ref[strings.LastIndex(ref, ":")+1:] }
	v := map[string]any{
		"controller": map[string]any{
			"image":    map[string]any{"repository": repo(controllerRef), "tag": tagOf(controllerRef)},
			"extraEnv": apiEnv,
		},
		"nodeAgent": map[string]any{
			"image":      map[string]any{"repository": repo(nodeAgentRef), "tag": tagOf(nodeAgentRef)},
			"extraEnv":   apiEnv,
			"privileged": privileged,
			"hostUsers":  privileged,
		},
	}
	if fi, err := os.Stat(filepath.Join(hostAgents, "bin")); err == nil && fi.IsDir() {
		v["nodeAgent"].(map[string]any)["agentRuntimes"] = map[string]any{"hostPath": hostAgents}
	}
	// The run source: this cluster has no kube-proxy and no cluster DNS, so
	// the node-agent reaches the controller's run source at the controller
	// pod's IP, and checks its certificate against the Service's name (as
	// docs/install.md tells such a cluster's operator to).
	if controllerIP != "" {
		v["nodeAgent"].(map[string]any)["extraArgs"] = []string{
			"--controller-url=https://" + controllerIP + ":9443",
			"--controller-server-name=" + release + "-run-source." + ns + ".svc",
		}
	}
	for k, e := range extra {
		v["nodeAgent"].(map[string]any)[k] = e
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(work, "values-*.json")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	path := f.Name()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func helmCmd(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	out, err := runCmd(ctx, helm, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if err != nil {
		t.Fatalf("%v\n--- pods ---\n%s", err, podsState())
	}
	return out
}

func podsState() string {
	out, _ := kubectlErr("get", "pods", "-A", "-o", "wide")
	ev, _ := kubectlErr("get", "events", "-n", ns, "--sort-by=.lastTimestamp")
	logs, _ := kubectlErr("logs", "-n", ns, "-l", "app.kubernetes.io/component=node-agent", "--tail=30", "--all-containers")
	return out + "\n--- events ---\n" + lastLines(ev, 25) + "\n--- node-agent logs ---\n" + logs
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// install installs (or upgrades to) the chart, unchanged, in the mode, and
// waits for the controller and the node-agent to be Ready.
func install(t *testing.T, privileged bool, extra map[string]any) {
	t.Helper()
	if _, err := kubectlErr("get", "namespace", ns); err != nil {
		k(t, "create", "namespace", ns)
		// docs/install.md: the node-agent needs the privileged Pod Security level.
		k(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=privileged")
	}
	helmCmd(t, "upgrade", "--install", release, filepath.Join(root, "charts", "harnessfacts"), "-n", ns,
		"-f", values(t, privileged, extra), "--wait", "--timeout", "5m")
	waitRollout(t)
	// A new controller pod (a first install) has a new IP: point the
	// node-agent at it.
	ip := strings.TrimSpace(k(t, "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=controller",
		"--field-selector", "status.phase=Running", "-o", "jsonpath={.items[0].status.podIP}"))
	if ip == "" {
		t.Fatalf("the controller pod has no IP\n%s", podsState())
	}
	if ip != controllerIP {
		controllerIP = ip
		helmCmd(t, "upgrade", release, filepath.Join(root, "charts", "harnessfacts"), "-n", ns,
			"-f", values(t, privileged, extra), "--wait", "--timeout", "5m")
		waitRollout(t)
	}
}

// controllerIP is the controller pod's IP the node-agent was last pointed at.
var controllerIP string

func waitRollout(t *testing.T) {
	t.Helper()
	for _, w := range []string{"deployment/" + release + "-controller", "daemonset/" + release + "-node-agent"} {
		if _, err := kubectlErr("rollout", "status", "-n", ns, w, "--timeout=4m"); err != nil {
			t.Fatalf("%v\n%s", err, podsState())
		}
	}
}

func uninstall(t *testing.T) {
	t.Helper()
	// The post-delete hook waits for the node-agent pod to be gone (its
	// grace period is 60 s) before it cleans the node.
	helmCmd(t, "uninstall", release, "-n", ns, "--wait", "--timeout", "5m")
	eventually(t, 2*time.Minute, "the release's pods gone", func() (bool, string) {
		out, _ := kubectlErr("get", "pods", "-n", ns, "-o", "name")
		return strings.TrimSpace(out) == "", out
	})
}

// nodeAgentPod returns the name and UID of the running node-agent pod.
func nodeAgentPod(t *testing.T) (string, string) {
	t.Helper()
	out := k(t, "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=node-agent",
		"--field-selector", "status.phase=Running", "-o", "jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.metadata.deletionTimestamp}{\"\\n\"}{end}")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 {
			return f[0], f[1]
		}
	}
	t.Fatalf("no running node-agent pod: %q\n%s", out, podsState())
	return "", ""
}

// execNodeAgent runs a command in the node-agent container.
func execNodeAgent(t *testing.T, args ...string) string {
	t.Helper()
	pod, _ := nodeAgentPod(t)
	return k(t, append([]string{"exec", "-n", ns, pod, "-c", "node-agent", "--"}, args...)...)
}

func harnessNode(t *testing.T) *harnessv1.HarnessNode {
	t.Helper()
	hn := &harnessv1.HarnessNode{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Name: nodeEnv["HARNESSFACTS_NODE_NAME"]}, hn); err != nil {
		t.Fatalf("the HarnessNode of %s: %v", nodeEnv["HARNESSFACTS_NODE_NAME"], err)
	}
	return hn
}

func getRun(t *testing.T, name string) *harnessv1.HarnessRun {
	t.Helper()
	run := &harnessv1.HarnessRun{}
	if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: name}, run); err != nil {
		t.Fatal(err)
	}
	return run
}

// waitRun waits for the run to end and returns it.
func waitRun(t *testing.T, name string, timeout time.Duration) *harnessv1.HarnessRun {
	t.Helper()
	var run *harnessv1.HarnessRun
	eventually(t, timeout, "HarnessRun "+name+" ends", func() (bool, string) {
		run = getRun(t, name)
		return run.Status.Phase.Terminal(), fmt.Sprintf("phase %s reason %s: %s", run.Status.Phase, run.Status.Reason, run.Status.Message)
	})
	return run
}

// requirePass checks a run passed in bwrap on this node, and that its
// evidence verifies with the CLI a user has.
func requirePass(t *testing.T, run *harnessv1.HarnessRun) {
	t.Helper()
	st := run.Status
	if st.Verdict != harnessv1.VerdictPass {
		tail := ""
		if st.Agent != nil {
			tail = st.Agent.OutputTail
		}
		t.Fatalf("%s: verdict %q, phase %s, reason %s: %s\nthe agent's output ends:\n%s\n%s", run.Name, st.Verdict, st.Phase, st.Reason, st.Message, tail, podsState())
	}
	if st.NodeName != nodeEnv["HARNESSFACTS_NODE_NAME"] {
		t.Fatalf("%s ran on %q, not the kubelet's node", run.Name, st.NodeName)
	}
	if c := meta.FindStatusCondition(st.Conditions, harnessv1.ConditionSandboxed); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("%s: Sandboxed condition %+v", run.Name, c)
	}
	if st.Sandbox == nil || st.Sandbox.Mode != "bwrap" {
		t.Fatalf("%s: sandbox %+v, want bwrap", run.Name, st.Sandbox)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := runCmd(ctx, bin, "evidence", "verify", "--kubeconfig", kubeconfig, "-n", run.Namespace, run.Name)
	if err != nil {
		t.Fatalf("harnessfacts evidence verify %s: %v", run.Name, err)
	}
	t.Logf("evidence verify %s: %s", run.Name, strings.TrimSpace(out))
}

func applyRun(t *testing.T, yaml string) {
	t.Helper()
	// Not t.TempDir(): subtest names may hold commas, which kubectl -f splits on.
	f, err := os.CreateTemp(work, "run-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	path := f.Name()
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	k(t, "apply", "-f", path)
}

// hostLeftovers lists what the node-agent may leave on the host: run dirs
// under the run root, per-run cgroups (harnessfacts/run-* below the
// kubelet's pods in any hierarchy), and node-agent or agent processes.
func hostLeftovers(t *testing.T) []string {
	t.Helper()
	var left []string
	if ents, err := os.ReadDir(runRoot); err == nil {
		for _, e := range ents {
			left = append(left, "run dir "+filepath.Join(runRoot, e.Name()))
		}
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*/harnessfacts-node")
	for _, h := range hier {
		_ = filepath.WalkDir(h, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), "run-") && filepath.Base(filepath.Dir(p)) == "harnessfacts" {
				left = append(left, "cgroup "+p)
			}
			return nil
		})
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(b), "\x00", " ")
		pid := filepath.Base(filepath.Dir(p))
		if strings.Contains(cmd, "harnessfacts-node-agent node-agent") || strings.HasPrefix(cmd, "bwrap ") && strings.Contains(cmd, runRoot) {
			left = append(left, "process "+pid+": "+cmd)
		}
	}
	return left
}
