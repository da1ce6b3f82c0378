package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// asNobody runs the real harnessfacts binary as uid/gid 65534.
func asNobody(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root to start a process as another uid (run `go test` as root, as CI does)")
	}
	cmd := exec.Command(harnessfactsBinary(t), args...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent", "NODE_NAME=n1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestNodeAgentRefusesToRunAsNonRoot: as any uid but 0 the node-agent
// stops at once with a message saying why, instead of running every agent
// as its own uid (it used to ignore --run-as-uid and go on).
func TestNodeAgentRefusesToRunAsNonRoot(t *testing.T) {
	out, err := asNobody(t, "node-agent", "--run-uids", "60000-60127", "--kubeconfig", "/nonexistent/kubeconfig")
	if err == nil {
		t.Fatalf("the node-agent started as uid 65534: %s", out)
	}
	if !strings.Contains(out, "the node-agent must run as root") || !strings.Contains(out, "/run/user/65534") {
		t.Errorf("the refusal does not say why: %s", out)
	}
	if strings.Contains(out, "kubeconfig") {
		t.Errorf("the node-agent went on to read its kubeconfig before refusing: %s", out)
	}
}

// TestLocalRunRefusesAUIDItCannotTake: `harnessfacts run --run-as-uid` as
// a non-root user is refused before anything runs.
func TestLocalRunRefusesAUIDItCannotTake(t *testing.T) {
	run := filepath.Join(repoRoot(t), "fixtures", "hello", "run.yaml")
	out, err := asNobody(t, "run", "-f", run, "--run-as-uid", "60001", "--run-root", "/nonexistent/runs")
	if err == nil || !strings.Contains(out, "--run-as-uid needs root") {
		t.Fatalf("run --run-as-uid as uid 65534: %v: %s", err, out)
	}
}
