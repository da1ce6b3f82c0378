package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

func TestTmpRSS(t *testing.T) {
	ctx := context.Background()
	const node, label = "tmp-rss-node", "harnessfacts.io/tmp-rss"
	dir, _ := os.MkdirTemp("", "harnessfacts-rss-")
	defer func() { _ = os.RemoveAll(dir) }()
	_ = os.Chmod(dir, 0o755)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	flags, err := secretPath.Flags(ctx, node, dir)
	if err != nil {
		t.Fatal(err)
	}
	logFile, _ := os.Create(filepath.Join(dir, "node-agent.log"))
	bin := binary
	if b := os.Getenv("TMP_BIN"); b != "" {
		bin = b
	}
	cmd := exec.Command(bin, append([]string{"node-agent", "--kubeconfig", kubeconfig, "--node-name", node,
		"--lease-namespace", leaseNS, "--run-root", filepath.Join(dir, "runs"), "--cgroup-mount", filepath.Join(dir, "cgroup"),
		"--slots", "8", "--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--logs-bind-address", "0",
		"--evidence-key", filepath.Join(dir, "keys", "evidence-key.pem"), "--node-labels", label + "=true"}, flags...)...)
	cmd.Env = append(os.Environ(), os.Getenv("TMP_ENV"))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		_ = k8s.Delete(context.Background(), &harnessv1.HarnessNode{ObjectMeta: metav1.ObjectMeta{Name: node}})
	}()
	for deadline := time.Now().Add(time.Minute); ; {
		hn := &harnessv1.HarnessNode{}
		if err := k8s.Get(ctx, types.NamespacedName{Name: node}, hn); err == nil && meta.IsStatusConditionTrue(hn.Status.Conditions, harnessv1.ConditionNodeReady) {
			break
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(logFile.Name())
			t.Fatalf("not ready\n%s", data)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(5 * time.Second)
	pid := cmd.Process.Pid
	st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(l, "VmRSS") || strings.HasPrefix(l, "RssAnon") || strings.HasPrefix(l, "RssFile") {
			fmt.Println(l)
		}
	}
	sm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	rss := map[string]int{}
	var cur string
	for _, l := range strings.Split(string(sm), "\n") {
		f := strings.Fields(l)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			cur = f[0] + " " + f[1]
			if len(f) >= 6 {
				cur += " " + f[5]
			}
			continue
		}
		if len(f) >= 2 && f[0] == "Rss:" {
			n, _ := strconv.Atoi(f[1])
			rss[cur] += n
		}
	}
	var keys []string
	for k := range rss {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return rss[keys[i]] > rss[keys[j]] })
	for _, k := range keys[:8] {
		fmt.Println(rss[k], k)
	}
}
