//go:build node

package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/sandbox"
	"github.com/harnessfacts/harnessfacts/test/oci"
)

const chartPath = "/opt/harnessfacts/agents/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// What must agree between the Dockerfile's images and these: the binary's
// path and entrypoint, the uids, PATH (the chart sets the same), the CLI
// folder and bwrap.
func TestImagesAgreeWithDockerfile(t *testing.T) {
	cf, err := imgs.controller.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || strings.Join(cf.Config.Entrypoint, " ") != "/harnessfacts" || strings.Join(cf.Config.Cmd, " ") != "controller --leader-elect" {
		t.Errorf("controller config: user %q entrypoint %q cmd %q", cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	files, err := oci.Files(imgs.controller)
	if err != nil {
		t.Fatal(err)
	}
	// harnessfacts hands `controller` to harnessfacts-full beside it.
	for _, p := range []string{"/harnessfacts", "/harnessfacts-full"} {
		if h := files[p]; h == nil || h.Mode&0o111 == 0 {
			t.Errorf("controller image: %s %+v", p, h)
		}
	}

	cf, err = imgs.nodeAgent.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "0:0" || strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/harnessfacts-node-agent" || strings.Join(cf.Config.Cmd, " ") != "node-agent" {
		t.Errorf("node-agent config: user %q entrypoint %q cmd %q", cf.Config.User, cf.Config.Entrypoint, cf.Config.Cmd)
	}
	if !containsString(cf.Config.Env, "PATH="+chartPath) {
		t.Errorf("node-agent PATH %q, want the chart's %q", cf.Config.Env, chartPath)
	}
	files, err = oci.Files(imgs.nodeAgent)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/usr/local/bin/harnessfacts-node-agent", "/usr/local/bin/harnessfacts", "/usr/local/bin/harnessfacts-full", "/usr/local/bin/harnessfacts-sandbox-init", "/usr/bin/bwrap", "/usr/bin/node", "/usr/bin/git",
		"/usr/local/lib/harnessfacts/install-agent-clis.sh", "/opt/harnessfacts/agents/bin"} {
		if files[p] == nil {
			t.Errorf("node-agent image has no %s", p)
		}
	}
	// The install step's links: every CLI the image has is on the
	// sandbox's fixed PATH (/usr/local/bin) too.
	n := 0
	for p, h := range files {
		if filepath.Dir(p) == "/opt/harnessfacts/agents/bin" {
			n++
			if l := files["/usr/local/bin/"+filepath.Base(p)]; l == nil || l.Linkname != p {
				t.Errorf("/usr/local/bin/%s does not link to %s (%+v)", filepath.Base(p), p, l)
			}
			_ = h
		}
	}
	if n == 0 {
		t.Errorf("the install script put no CLI into /opt/harnessfacts/agents/bin")
	}
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The privileged mode, the fallback for nodes without pod user namespaces
// and the one this cgroup-v1 machine can honour fully: per-run cgroups with
// limits, OOM, the samples, a real CLI and the faults.
func TestPrivilegedNode(t *testing.T) {
	// The node's open-file table as the kernel sets it without systemd
	// (about one file per 10 KiB of memory), given back after: the
	// privileged node-agent raises it at start.
	lowFileTable(t)
	install(t, true, nil)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(podsState())
		}
	})

	t.Run("Node and HarnessNode", func(t *testing.T) {
		out := k(t, "get", "node", nodeEnv["HARNESSFACTS_NODE_NAME"], "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status} {.status.nodeInfo.kubeletVersion} {.status.nodeInfo.containerRuntimeVersion}")
		t.Logf("Node: %s", out)
		if !strings.HasPrefix(out, "True ") {
			t.Fatalf("Node not Ready: %s", out)
		}
		eventually(t, time.Minute, "the HarnessNode is Ready with bwrap available, each run with a CPU share and each sandbox a /dev of its own", func() (bool, string) {
			hn := harnessNode(t)
			ok := meta.IsStatusConditionTrue(hn.Status.Conditions, harnessv1.ConditionNodeReady)
			bw := false
			for _, m := range hn.Status.SandboxModes {
				// The pod's cgroup v1 hierarchies are writable, the cpu one
				// too: runs' cgroups are made in memory, pids and cpu.
				// Privileged: each sandbox gets a /dev of the runner's,
				// its ptys bounded.
				// It raised the node's open-file table (fs.file-max),
				// which lowFileTable had set to the kernel's default.
				if m.Mode == "bwrap" && m.Available && strings.Contains(m.Message, "(memory, pids, cpu)") && !strings.Contains(m.Message, sandbox.NoCPUShare) &&
					strings.Contains(m.Message, fmt.Sprintf("a /dev of its own with at most %d ptys per sandbox", sandbox.MaxPtys)) &&
					!strings.Contains(m.Message, sandbox.NoFileTableBound) {
					bw = true
				}
			}
			return ok && bw, nodeSummary(hn)
		})
	})

	t.Run("image inside the pod", func(t *testing.T) {
		out := execNodeAgent(t, "sh", "-c", `id -u; command -v harnessfacts; bwrap --version; echo "$PATH"; ls /opt/harnessfacts/agents/bin`)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 4 || lines[0] != "0" || lines[1] != "/usr/local/bin/harnessfacts" || !strings.HasPrefix(lines[2], "bubblewrap ") || lines[3] != chartPath {
			t.Fatalf("in the node-agent container: %q", out)
		}
		// The controller runs as distroless' nonroot uid, in the process
		// the image's entry point /harnessfacts became: it hands
		// `controller` to /harnessfacts-full beside it by exec.
		uid := processUID(t, "/harnessfacts-full controller")
		if uid != "65532" {
			t.Fatalf("the controller runs as uid %s, want 65532", uid)
		}
	})

	t.Run("sample HarnessRun passes in bwrap and its evidence verifies", func(t *testing.T) {
		k(t, "apply", "-f", filepath.Join(root, "config", "samples", "harnessrun_exec.yaml"))
		requirePass(t, waitRun(t, "hello-exec", 3*time.Minute))
	})

	t.Run("the node-agent is in its own leaf cgroup with the chart's hard memory limit", func(t *testing.T) {
		pid := processPID(t, "harnessfacts-node-agent node-agent")
		b, err := os.ReadFile("/proc/" + pid + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		mem := ""
		for _, l := range strings.Split(string(b), "\n") {
			if p := strings.SplitN(l, ":", 3); len(p) == 3 && p[1] == "memory" {
				mem = p[2]
			}
		}
		if filepath.Base(mem) != "agent" || !strings.Contains(mem, "/kubepods/") {
			t.Fatalf("the node-agent's memory cgroup is %q, want <its container's cgroup>/agent", mem)
		}
		limit, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", mem, "memory.limit_in_bytes"))
		if err != nil || strings.TrimSpace(string(limit)) != "536870912" {
			t.Fatalf("the node-agent's leaf has memory.limit_in_bytes %q (%v), want the chart's nodeAgent.memoryLimit 512Mi", limit, err)
		}
		t.Logf("node-agent in %s, limit %s", mem, strings.TrimSpace(string(limit)))
	})

	t.Run("memory limit: the run is OOM-killed, the node-agent survives", func(t *testing.T) {
		_, uidBefore := nodeAgentPod(t)
		applyRun(t, `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: oom, namespace: default}
spec:
  agent:
    adapter: exec
    command: [sh, -c, "tail /dev/zero; echo survived"]
  fixture:
    inline:
      files:
        fixture.yaml: "prompt: use too much memory\n"
  limits: {memory: 48Mi, episodeSeconds: 60, probeSeconds: 30}
`)
		run := waitRun(t, "oom", 3*time.Minute)
		if run.Status.Agent == nil || !run.Status.Agent.OOMKilled {
			t.Fatalf("oom: agent %+v, phase %s reason %s: %s", run.Status.Agent, run.Status.Phase, run.Status.Reason, run.Status.Message)
		}
		_, uidAfter := nodeAgentPod(t)
		restarts := k(t, "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=node-agent", "-o", "jsonpath={.items[0].status.containerStatuses[0].restartCount}")
		if uidAfter != uidBefore || restarts != "0" {
			t.Fatalf("the node-agent did not survive the run's OOM: pod %s -> %s, restarts %s", uidBefore, uidAfter, restarts)
		}
		// The OOM kill was the run's cgroup's, not the node-agent's leaf's.
		b, _ := os.ReadFile("/proc/" + processPID(t, "harnessfacts-node-agent node-agent") + "/cgroup")
		for _, l := range strings.Split(string(b), "\n") {
			if p := strings.SplitN(l, ":", 3); len(p) == 3 && p[1] == "memory" {
				oc, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", p[2], "memory.oom_control"))
				if !strings.Contains(string(oc), "oom_kill 0") {
					t.Fatalf("the node-agent's leaf %s saw an OOM kill:\n%s", p[2], oc)
				}
			}
		}
		t.Logf("oom: %s (%s)", run.Status.Reason, run.Status.Message)
	})

	t.Run("no zombie: the node-agent's init reaps orphans", func(t *testing.T) {
		// PID 1 of the container is the minimal init (--reap-orphans), the
		// node-agent its child.
		pids := nodeAgentProcesses()
		ones := 0
		for _, p := range pids {
			if nsPID(p) == "1" {
				ones++
			}
		}
		if len(pids) != 2 || ones != 1 {
			t.Fatalf("node-agent processes %v (pid 1 in the container: %d), want the init as PID 1 and the node-agent as its child", pids, ones)
		}
		// A sandbox payload that double-forks and exits, and one killed at
		// its deadline with its children still running.
		applyRun(t, `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: double-fork, namespace: default}
spec:
  agent:
    adapter: exec
    command: [sh, -c, "(sleep 2 &); (setsid sleep 3 &); sleep 0.5 & echo ok > done.txt"]
  fixture:
    inline:
      files:
        fixture.yaml: "prompt: fork\nartifacts: [done.txt]\n"
  limits: {episodeSeconds: 60, probeSeconds: 30}
`)
		applyRun(t, `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: killed-forks, namespace: default}
spec:
  agent:
    adapter: exec
    command: [sh, -c, "(sleep 100 &); sleep 100 & sleep 100"]
  fixture:
    inline:
      files:
        fixture.yaml: "prompt: fork and hang\n"
  limits: {episodeSeconds: 5, probeSeconds: 5}
`)
		requirePass(t, waitRun(t, "double-fork", 3*time.Minute))
		if r := waitRun(t, "killed-forks", 3*time.Minute); r.Status.Reason != harnessv1.ReasonDeadlineExceeded {
			t.Fatalf("killed-forks: %s %s: %s", r.Status.Phase, r.Status.Reason, r.Status.Message)
		}
		// What a kubectl exec leaves: its shell's parent is outside the
		// container, so the orphan goes to the container's PID 1.
		execNodeAgent(t, "sh", "-c", "sleep 1 & exit 0")
		time.Sleep(2 * time.Second) // the orphans have exited by now
		eventually(t, 30*time.Second, "no zombie below the node-agent's processes", func() (bool, string) {
			z := zombiesBelow(nodeAgentProcesses()...)
			return len(z) == 0, strings.Join(z, "; ")
		})
	})

	t.Run("a real agent CLI passes hello against fake-provider from inside the pod", func(t *testing.T) {
		realCLI(t)
	})

	t.Run("the sample HarnessSuite completes", func(t *testing.T) {
		k(t, "apply", "-k", filepath.Join(root, "fixtures", "suite"))
		eventually(t, 8*time.Minute, "HarnessSuite smoke Complete", func() (bool, string) {
			out, _ := kubectlErr("get", "harnesssuite", "smoke", "-n", "default", "-o", "jsonpath={.status.conditions[?(@.type==\"Complete\")].status} {.status.conditions[?(@.type==\"Progressing\")].message}")
			return strings.HasPrefix(out, "True"), out
		})
	})

	t.Run("node-agent pod deleted mid-run: retried once, never run twice, leftovers removed", func(t *testing.T) {
		faultDeletePod(t)
	})

	t.Run("helm upgrade drains the node-agent and upgrades the CRDs in place", func(t *testing.T) {
		faultUpgrade(t)
	})

	t.Run("helm uninstall leaves nothing on the host", func(t *testing.T) {
		// A run longer than the node-agent's shutdown grace is killed with it
		// and leaves its run dir; the chart's post-delete hook removes it,
		// and the run root and its parent, which the kubelet made.
		applyRun(t, sleeperRun("uninstalled", "600", 0))
		waitRunning(t, "uninstalled")
		eventually(t, time.Minute, "the run's dir on the host", func() (bool, string) {
			ents, _ := os.ReadDir(runRoot)
			return len(ents) > 0, fmt.Sprint(ents)
		})
		uninstall(t)
		eventually(t, time.Minute, "no node-agent leftovers on the host", func() (bool, string) {
			left := hostLeftovers(t)
			if _, err := os.Stat(runRoot); err == nil {
				left = append(left, "folder "+runRoot)
			}
			// The parent goes too, unless it held something else before
			// the tests began (then that is all it may hold).
			if ents, err := os.ReadDir(filepath.Dir(runRoot)); err == nil {
				var names []string
				for _, e := range ents {
					names = append(names, e.Name())
					if !slices.Contains(foreignInRunRootParent, e.Name()) {
						left = append(left, "in "+filepath.Dir(runRoot)+": "+e.Name())
					}
				}
				if len(names) == 0 || len(foreignInRunRootParent) == 0 {
					left = append(left, "folder "+filepath.Dir(runRoot))
				}
			}
			return len(left) == 0, strings.Join(left, "; ")
		})
		// The CRDs and the runs stay (crds.keep): the record is not lost.
		getRun(t, "hello-exec")
	})
}

// The user-namespaced pod (the chart's default). On this cgroup-v1 machine
// bubblewrap works in such a pod, but the pod gets no writable cgroups for
// the per-run limits, so the node cannot honour the mode: the node-agent
// refuses at start, saying why in its HarnessNode and its log, and runs no
// agent. The first half shows bwrap --unshare-all in a pod with exactly the
// chart's user-namespaced pod spec (its command replaced by a sleep).
func TestUserNamespacedNode(t *testing.T) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(podsState())
		}
	})
	t.Run("bwrap --unshare-all in the chart's user-namespaced pod", func(t *testing.T) {
		probe := chartPodAsProbe(t)
		defer func() { _, _ = kubectlErr("delete", "pod", "-n", ns, probe, "--wait=false") }()
		uidMap := strings.Fields(k(t, "exec", "-n", ns, probe, "--", "cat", "/proc/self/uid_map"))
		if len(uidMap) < 3 || uidMap[0] != "0" || uidMap[1] == "0" {
			t.Fatalf("the pod is not in its own user namespace: uid_map %q", uidMap)
		}
		// As the node-agent does: bwrap runs as the agent's unprivileged uid.
		out := k(t, "exec", "-n", ns, probe, "--", "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/", "/",
			"--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "sh", "-c", "cat /proc/self/uid_map; echo bwrap-ok")
		if !strings.Contains(out, "bwrap-ok") {
			t.Fatalf("bwrap --unshare-all in the user-namespaced pod: %q", out)
		}
		t.Logf("pod uid_map %v; bwrap inside it: %q", uidMap, out)
	})

	t.Run("the node-agent refuses the mode it cannot honour", func(t *testing.T) {
		if _, err := kubectlErr("get", "namespace", ns); err != nil {
			k(t, "create", "namespace", ns)
			k(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=privileged")
		}
		// No --wait: the node-agent is meant never to become Ready here.
		helmCmd(t, "install", release, filepath.Join(root, "charts", "harnessfacts"), "-n", ns, "-f", values(t, false, nil))
		defer uninstall(t)
		var hn *harnessv1.HarnessNode
		eventually(t, 3*time.Minute, "the HarnessNode says the node-agent refuses", func() (bool, string) {
			// Not there yet when this test runs alone, on a fresh cluster:
			// the node-agent registers it as it starts.
			hn = &harnessv1.HarnessNode{}
			if err := k8s.Get(context.Background(), types.NamespacedName{Name: nodeEnv["HARNESSFACTS_NODE_NAME"]}, hn); err != nil {
				return false, err.Error()
			}
			c := meta.FindStatusCondition(hn.Status.Conditions, harnessv1.ConditionNodeReady)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == harnessv1.ReasonSandboxUnavailable &&
				strings.Contains(c.Message, "refuses") && strings.Contains(c.Message, "cgroup v1"), nodeSummary(hn)
		})
		t.Logf("HarnessNode: %s", nodeSummary(hn))
		// The refusal reaches the HarnessNode a moment before the log line
		// reaches the container's log (and a container restarted meanwhile
		// has logged only its start): read both containers' logs until it
		// is there.
		eventually(t, 30*time.Second, "the node-agent's log says it refuses", func() (bool, string) {
			prev, _ := kubectlErr("logs", "-n", ns, "-l", "app.kubernetes.io/component=node-agent", "--tail=20", "--previous")
			cur, _ := kubectlErr("logs", "-n", ns, "-l", "app.kubernetes.io/component=node-agent", "--tail=20")
			logs := prev + cur
			return strings.Contains(logs, "refuses to run agents"), logs
		})
		// A run must not run on this node.
		_, _ = kubectlErr("delete", "harnessrun", "hello-exec", "-n", "default", "--wait=true")
		k(t, "apply", "-f", filepath.Join(root, "config", "samples", "harnessrun_exec.yaml"))
		time.Sleep(10 * time.Second)
		run := getRun(t, "hello-exec")
		if run.Status.Phase == harnessv1.RunRunning || run.Status.Phase == harnessv1.RunSucceeded || run.Status.NodeName != "" {
			t.Fatalf("a run was bound to a node that refused: %s on %q: %s", run.Status.Phase, run.Status.NodeName, run.Status.Message)
		}
		t.Logf("the sample run: phase %s reason %s: %s", run.Status.Phase, run.Status.Reason, run.Status.Message)
		_, _ = kubectlErr("delete", "harnessrun", "hello-exec", "-n", "default", "--wait=true")
	})
}

// chartPodAsProbe creates a pod from the chart's node-agent DaemonSet
// rendered with its defaults (hostUsers: false, procMount: Unmasked, the
// capabilities, Unconfined seccomp and AppArmor) and the images built here,
// whose container sleeps instead of running the node-agent; returns its
// name once it is Ready.
func chartPodAsProbe(t *testing.T) string {
	t.Helper()
	if _, err := kubectlErr("get", "namespace", ns); err != nil {
		k(t, "create", "namespace", ns)
		k(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=privileged")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := runCmd(ctx, helm, "template", release, filepath.Join(root, "charts", "harnessfacts"), "-n", ns,
		"-f", values(t, false, nil), "--show-only", "templates/node-agent-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ds := &appsv1.DaemonSet{}
	if err := yaml.Unmarshal([]byte(out), ds); err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if spec.HostUsers == nil || *spec.HostUsers {
		t.Fatalf("the chart's default node-agent pod is not user-namespaced: hostUsers %v", spec.HostUsers)
	}
	c := &spec.Containers[0]
	c.Command, c.Args = []string{"/bin/sleep", "infinity"}, nil
	c.LivenessProbe, c.ReadinessProbe, c.StartupProbe = nil, nil, nil
	// The probe needs no API access: no service account token, and not
	// the run source's CA and token (made by a release it does not have).
	var vols []corev1.Volume
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil && v.Projected == nil && v.Secret == nil {
			vols = append(vols, v)
		}
	}
	spec.Volumes = vols
	var mounts []corev1.VolumeMount
	for _, m := range spec.Containers[0].VolumeMounts {
		for _, v := range vols {
			if v.Name == m.Name {
				mounts = append(mounts, m)
			}
		}
	}
	spec.Containers[0].VolumeMounts = mounts
	spec.ServiceAccountName = ""
	no := false
	spec.AutomountServiceAccountToken = &no
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bwrap-probe", Namespace: ns}, Spec: spec}
	if err := k8s.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if _, err := kubectlErr("wait", "-n", ns, "pod/bwrap-probe", "--for=condition=Ready", "--timeout=2m"); err != nil {
		t.Fatalf("%v\n%s", err, podsState())
	}
	return pod.Name
}

func nodeSummary(hn *harnessv1.HarnessNode) string {
	var b strings.Builder
	for _, c := range hn.Status.Conditions {
		b.WriteString(c.Type + "=" + string(c.Status) + " (" + c.Reason + ": " + c.Message + "); ")
	}
	for _, m := range hn.Status.SandboxModes {
		b.WriteString("mode " + m.Mode + " available=" + boolString(m.Available) + ": " + m.Message + "; ")
	}
	for _, a := range hn.Status.Adapters {
		b.WriteString("adapter " + string(a.Name) + " " + a.Version + "; ")
	}
	return b.String()
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// processPID finds a host process by its command line and returns its pid.
// The node-agent's container has two with its command line: PID 1 of the
// container, the minimal init (--reap-orphans), and its child, the
// node-agent, which is the one returned.
func processPID(t *testing.T, cmdline string) string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	found := ""
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), cmdline) {
			pid := filepath.Base(filepath.Dir(p))
			if found == "" || nsPID(pid) != "1" {
				found = pid
			}
		}
	}
	if found == "" {
		t.Fatalf("no process %q on the host", cmdline)
	}
	return found
}

// nsPID is the host process pid's pid in its own (innermost) pid namespace.
func nsPID(pid string) string {
	b, _ := os.ReadFile("/proc/" + pid + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "NSpid:" {
			return f[len(f)-1]
		}
	}
	return ""
}

// zombiesBelow lists the zombie processes whose parent is one of pids.
func zombiesBelow(pids ...string) []string {
	parent := map[string]bool{}
	for _, p := range pids {
		parent[p] = true
	}
	var z []string
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[0] == "Z" && parent[f[1]] {
			z = append(z, s[:i+1]+" parent "+f[1])
		}
	}
	return z
}

// nodeAgentProcesses are the host pids of every process with the
// node-agent's command line: its container's init and the node-agent.
func nodeAgentProcesses() []string {
	var pids []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), "harnessfacts-node-agent node-agent") {
			pids = append(pids, filepath.Base(filepath.Dir(p)))
		}
	}
	return pids
}

// processUID finds a host process by its command line and returns its uid.
func processUID(t *testing.T, cmdline string) string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), cmdline) {
			continue
		}
		f, err := os.Open(filepath.Join(filepath.Dir(p), "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if fields := strings.Fields(sc.Text()); len(fields) > 1 && fields[0] == "Uid:" {
				f.Close()
				return fields[1]
			}
		}
		f.Close()
	}
	t.Fatalf("no process %q on the host", cmdline)
	return ""
}

// realCLI runs the hello fixture with the first real CLI the HarnessNode
// reports (from the host's /opt/harnessfacts/agents through the chart's
// agentRuntimes.hostPath, or the image's own) against fake-provider on the
// node IP, reached from the sandbox through the run's egress proxy, which
// a HarnessPolicy lets reach that private address.
func realCLI(t *testing.T) {
	hn := harnessNode(t)
	cli := ""
	for _, want := range []harnessv1.Adapter{"claude-code", "gemini", "codex", "opencode"} {
		for _, a := range hn.Status.Adapters {
			if a.Name == want {
				cli = string(want)
			}
		}
		if cli != "" {
			break
		}
	}
	if cli == "" {
		t.Fatalf("no agent CLI on the node: %s", nodeSummary(hn))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	provider := exec.CommandContext(ctx, bin, "fake-provider", "--fixtures", filepath.Join(root, "fixtures"), "--listen", nodeEnv["HARNESSFACTS_NODE_IP"]+":0")
	stdout, err := provider.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	provider.Stderr = os.Stderr
	if err := provider.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = provider.Wait() }()
	sc := bufio.NewScanner(stdout)
	url := ""
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "fake-provider listening on "); ok {
			url = u
			break
		}
	}
	if url == "" {
		t.Fatal("fake-provider did not say where it listens")
	}
	go func() {
		for sc.Scan() {
		}
	}()
	// The node IP is a private address: egress ProviderOnly reaches it
	// only where a HarnessPolicy allows it (network.insideHosts), as an
	// operator would for a model gateway inside the network.
	applyRun(t, `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessPolicy
metadata: {name: node-test-provider}
spec:
  namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: default}}
  network: {insideHosts: [`+nodeEnv["HARNESSFACTS_NODE_IP"]+`]}
`)
	defer func() { _, _ = kubectlErr("delete", "harnesspolicy", "node-test-provider") }()
	k(t, "apply", "-k", filepath.Join(root, "fixtures", "hello"))
	name := "hello-" + cli
	applyRun(t, `apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: `+name+`, namespace: default}
spec:
  agent:
    adapter: `+cli+`
    providerURL: `+url+`/s/hello
  fixture:
    configMapRef: {name: fixture-hello}
`)
	run := waitRun(t, name, 5*time.Minute)
	requirePass(t, run)
	t.Logf("%s %s passed hello in the pod: %d turn(s), MCP calls %d", cli, run.Status.Agent.CLIVersion, run.Status.Agent.Turns, mcpCalls(run))
}

func mcpCalls(run *harnessv1.HarnessRun) int32 {
	if run.Status.MCP == nil {
		return 0
	}
	return run.Status.MCP.Calls
}

// lowFileTable sets the host's fs.file-max to the kernel's default for its
// memory (about one file per 10 KiB; no systemd raised it) until the test
// ends.
func lowFileTable(t *testing.T) {
	t.Helper()
	const path = "/proc/sys/fs/file-max"
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(path, orig, 0); err != nil {
			t.Errorf("giving fs.file-max back its %s: %v", strings.TrimSpace(string(orig)), err)
		}
	})
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	var kb uint64
	for line := range strings.Lines(string(meminfo)) {
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			break
		}
	}
	if kb == 0 {
		t.Fatal("/proc/meminfo has no MemTotal")
	}
	if err := os.WriteFile(path, []byte(fmt.Sprintf("%d\n", kb/10)), 0); err != nil {
		t.Fatal(err)
	}
}
