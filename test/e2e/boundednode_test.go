//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
	"github.com/harnessfacts/harnessfacts/sandbox"
)

// boundedNodeAgent is a node-agent process started as the chart's
// DaemonSet starts it: in a fresh cgroup of its own (what its container's
// cgroup is), with the chart's memory figures.
type boundedNodeAgent struct {
	pid  int
	done chan struct{}
	err  error
	// base is its starting cgroup, relative to each hierarchy's root; dirs
	// are base in each hierarchy, memDir the one with the memory controller.
	base   string
	dirs   []string
	memDir string
	v2     bool
	runs   string
	// limit is the chart's nodeAgent.memoryLimit, goMemLimit its goMemLimit.
	limit, goMemLimit int64
}

// chartMemory reads nodeAgent.memoryLimit and goMemLimit from the chart's
// values.yaml, as written there.
func chartMemory(t *testing.T) (limit string, limitBytes, goMemLimit int64) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "charts", "harnessfacts", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		NodeAgent struct {
			MemoryLimit string `json:"memoryLimit"`
			GoMemLimit  string `json:"goMemLimit"`
		} `json:"nodeAgent"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	q, err := resource.ParseQuantity(v.NodeAgent.MemoryLimit)
	if err != nil || q.Value() <= 0 {
		t.Fatalf("the chart's nodeAgent.memoryLimit %q: %v", v.NodeAgent.MemoryLimit, err)
	}
	// GOMEMLIMIT's own syntax: a number and B, KiB, MiB or GiB.
	g := v.NodeAgent.GoMemLimit
	for suffix, mult := range map[string]int64{"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10} {
		if n, ok := strings.CutSuffix(g, suffix); ok {
			x, err := strconv.ParseInt(n, 10, 64)
			if err != nil {
				t.Fatalf("the chart's nodeAgent.goMemLimit %q: %v", g, err)
			}
			return v.NodeAgent.MemoryLimit, q.Value(), x * mult
		}
	}
	t.Fatalf("the chart's nodeAgent.goMemLimit %q: not in MiB, GiB or KiB", g)
	return "", 0, 0
}

// startBoundedNodeAgent starts the node-agent binary for node name in a
// fresh cgroup, with the chart's --memory-limit and GOMEMLIMIT, and waits
// for its HarnessNode to be Ready, with extra flags after the chart's.
// Everything is undone when the test ends.
func startBoundedNodeAgent(t *testing.T, name string, labels map[string]string, extra ...string) *boundedNodeAgent {
	t.Helper()
	limitArg, limit, goMemLimit := chartMemory(t)
	na := &boundedNodeAgent{done: make(chan struct{}), limit: limit, goMemLimit: goMemLimit,
		base: fmt.Sprintf("/harnessfacts-e2e-%d/%s", os.Getpid(), name), v2: cgroups.Mode() == cgroups.Unified}
	if na.v2 {
		na.dirs = []string{filepath.Join("/sys/fs/cgroup", na.base)}
		na.memDir = na.dirs[0]
	} else {
		na.dirs = []string{filepath.Join("/sys/fs/cgroup/memory", na.base), filepath.Join("/sys/fs/cgroup/pids", na.base)}
		na.memDir = na.dirs[0]
	}
	for _, d := range na.dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Cleanups run last-registered first: the cgroups go after the process.
	t.Cleanup(func() {
		for _, d := range na.dirs {
			var all []string
			_ = filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					all = append(all, p)
				}
				return nil
			})
			for i := len(all) - 1; i >= 0; i-- {
				_ = os.Remove(all[i])
			}
			_ = os.Remove(filepath.Dir(d))
		}
	})
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: name}})
	})
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	na.runs = filepath.Join(openDir(t), "runs")
	var pairs []string
	for k, v := range labels {
		pairs = append(pairs, k+"="+v)
	}
	controllerFlags, err := secretPath.Flags(context.Background(), name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// As a container runtime does: the process is in its cgroup from its
	// first instruction on (the shell enters it, then execs the binary).
	cmd := exec.Command("sh", append([]string{"-c", `for d in $HF_TEST_CGROUPS; do echo $$ > "$d/cgroup.procs" || exit 1; done; exec "$0" "$@"`,
		nodeAgentBinary, "node-agent", "--kubeconfig", kubeconfig, "--node-name", name,
		"--lease-namespace", leaseNS, "--lease-duration", "8s", "--slots", "2", "--run-root", na.runs,
		"--node-labels", strings.Join(pairs, ","), "--memory-limit", limitArg,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--protect-kernel-defaults"}, append(controllerFlags, extra...)...)...)
	cmd.Env = append(os.Environ(), "HF_TEST_CGROUPS="+strings.Join(na.dirs, " "), fmt.Sprintf("GOMEMLIMIT=%dMiB", goMemLimit>>20))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	na.pid = cmd.Process.Pid
	go func() { na.err = cmd.Wait(); close(na.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-na.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-na.done
		}
		if t.Failed() {
			t.Logf("node-agent %s logs:\n%s", name, logs.String())
		}
	})
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := na.alive(); err != nil {
			t.Fatalf("%v\n%s", err, logs.String())
		}
		hn := &harnessv1.HarnessNode{}
		if err := k8s.Get(context.Background(), client.ObjectKey{Name: name}, hn); err == nil && meta.IsStatusConditionTrue(hn.Status.Conditions, harnessv1.ConditionNodeReady) {
			return na
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node-agent of %s did not become Ready:\n%s", name, logs.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (na *boundedNodeAgent) alive() error {
	select {
	case <-na.done:
		return fmt.Errorf("the node-agent exited: %w", na.err)
	default:
		return nil
	}
}

// rss is the node-agent process's resident set size.
func (na *boundedNodeAgent) rss() int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", na.pid))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func (na *boundedNodeAgent) leafFile(v1, v2 string) string {
	f := v1
	if na.v2 {
		f = v2
	}
	return filepath.Join(na.memDir, sandbox.AgentLeaf, f)
}

func (na *boundedNodeAgent) leafLimit(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile(na.leafFile("memory.limit_in_bytes", "memory.max"))
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

func (na *boundedNodeAgent) leafPeak() int64 {
	b, _ := os.ReadFile(na.leafFile("memory.max_usage_in_bytes", "memory.peak"))
	v, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return v
}

func (na *boundedNodeAgent) leafOOMKills() int64 {
	b, _ := os.ReadFile(na.leafFile("memory.oom_control", "memory.events"))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "oom_kill" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}

func (na *boundedNodeAgent) waitNoRunDirs(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries, _ := os.ReadDir(na.runs)
		if len(entries) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run dirs left in %s: %v", na.runs, entries)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cgroupMemoryPeak is the memory cgroup of process pid (relative to the
// hierarchy's root) and that cgroup's peak memory use so far.
func cgroupMemoryPeak(pid string) (string, int64) {
	b, _ := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
	v2 := cgroups.Mode() == cgroups.Unified
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var f string
		switch {
		case v2 && parts[0] == "0":
			f = filepath.Join("/sys/fs/cgroup", parts[2], "memory.peak")
		case !v2 && parts[1] == "memory":
			f = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.max_usage_in_bytes")
		default:
			continue
		}
		p, _ := os.ReadFile(f)
		v, _ := strconv.ParseInt(strings.TrimSpace(string(p)), 10, 64)
		return parts[2], v
	}
	return "", 0
}
