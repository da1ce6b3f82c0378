//go:build linux

package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestDevStartsAndStopsCleanly runs `harnessfacts dev` as a user would,
// waits until it says it is ready and its kubeconfig reaches a control plane
// where this machine's node is registered, then sends SIGTERM (what Ctrl-C
// does to the foreground job) and checks that it exits, that its
// kube-apiserver and etcd are gone, and that it removed its kubeconfig.
func TestDevStartsAndStopsCleanly(t *testing.T) {
	dir := openDir(t)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cmd := exec.Command(binary, "dev", "--assets", env.Assets, "--kubeconfig", kubeconfig,
		"--run-root", filepath.Join(dir, "runs"), "--node-name", "dev-node")
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	ready := make(chan struct{})
	var mu sync.Mutex
	var tail []string
	go func() {
		s := bufio.NewScanner(logs)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			mu.Lock()
			tail = append(tail, s.Text())
			mu.Unlock()
			if strings.Contains(s.Text(), "ready: the local control plane runs HarnessRuns") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(2 * time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("harnessfacts dev never became ready:\n%s", strings.Join(tail, "\n"))
	}

	kubectl := filepath.Join(env.Assets, "kubectl")
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "harnessnode", "dev-node", "-o", "name").CombinedOutput()
		if err == nil && strings.Contains(string(out), "dev-node") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dev node never registered: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A run with a fixture ConfigMap and a credential: dev's node-agent, a
	// process with no pod, reads both through the controller's run source
	// with its own account's token.
	manifest := `apiVersion: v1
kind: Secret
metadata: {name: dev-cred, namespace: default}
stringData: {token: dev-secret-value}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: dev-fixture, namespace: default}
data:
  fixture.yaml: |
    prompt: Write ok.txt.
---
apiVersion: harnessfacts.io/v1alpha1
kind: HarnessRun
metadata: {name: dev-run, namespace: default}
spec:
  agent:
    adapter: exec
    command: ["sh", "-c", "test \"$DEV_TOKEN\" = dev-secret-value && echo ok > ok.txt"]
    credentials: [{secretKeyRef: {name: dev-cred, key: token}, env: DEV_TOKEN}]
  fixture: {configMapRef: {name: dev-fixture}}
  limits: {episodeSeconds: 60, probeSeconds: 30}
`
	apply := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-")
	apply.Stdin = strings.NewReader(manifest)
	if out, err := apply.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	deadline = time.Now().Add(2 * time.Minute)
	for {
		out, _ := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "harnessrun", "dev-run", "-o",
			"jsonpath={.status.phase} {.status.reason}: {.status.message}").CombinedOutput()
		if strings.HasPrefix(string(out), "Succeeded") {
			break
		}
		if strings.HasPrefix(string(out), "Failed") || time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("the dev run did not succeed: %s\n%s", out, strings.Join(tail, "\n"))
		}
		time.Sleep(300 * time.Millisecond)
	}

	children := childrenOf(cmd.Process.Pid)
	if len(children) < 2 {
		t.Fatalf("want kube-apiserver and etcd among dev's children, got pids %v", children)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("harnessfacts dev did not exit cleanly on SIGTERM: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("harnessfacts dev did not stop within a minute of SIGTERM")
	}
	for _, pid := range children {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			t.Errorf("process %d that dev started is still running", pid)
		}
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("dev left its kubeconfig behind (%v)", err)
	}
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The command sits in parentheses and may hold spaces; the parent
		// pid is the second field after it.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		if f := strings.Fields(rest); len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				out = append(out, p)
			}
		}
	}
	return out
}
