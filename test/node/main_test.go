//go:build node

// Package node runs HarnessFacts on a real single-node cluster on this
// machine: hack/node.sh starts etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd with runc and the CNI bridge, and a kubelet; the
// images are built without an engine (test/oci) from the same binary, the
// Dockerfile's instructions and the same install script, imported into
// containerd, and the chart is installed unchanged but for image references
// and what a user of such a cluster would set. The tests then run the
// samples, both node modes and the faults through the real kubelet.
//
// It needs root and takes minutes, so it is behind the build tag "node":
//
//	make test-node      (go test -tags node ./test/node/)
package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

var (
	root = repoRoot()
	// nodeEnv is what `hack/node.sh env` prints (KUBECONFIG, the node IP, ...).
	nodeEnv    map[string]string
	kubeconfig string
	kubectl    string
	helm       string
	ctr        string
	k8s        client.Client
	// work is this run's scratch folder (binaries, image tarballs, logs).
	work string
	// bin is the harnessfacts binary the images carry, for the CLI side
	// (evidence verify, fake-provider) too.
	bin string
	// imgs are the images built for this run.
	imgs *images
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// foreignInRunRootParent lists what the run root's parent held before the
// tests began, other than the run root.
var foreignInRunRootParent []string

func run(m *testing.M) (code int) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "test/node needs root: it starts a kubelet, containerd and network devices (make test-node as root)")
		return 1
	}
	// What the run root's parent holds before the chart is ever installed
	// is not the chart's (on a shared machine, other tools' files): it
	// may stay after helm uninstall, and keeps the parent with it.
	if ents, err := os.ReadDir(filepath.Dir(runRoot)); err == nil {
		for _, e := range ents {
			if e.Name() != filepath.Base(runRoot) {
				foreignInRunRootParent = append(foreignInRunRootParent, e.Name())
			}
		}
	}
	var err error
	if helm, err = script("helm.sh"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if work, err = os.MkdirTemp("", "harnessfacts-node-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(work)
	// The images first: a failing build must not leave a node behind.
	imgs, err = buildImages(work)
	if err != nil {
		fmt.Fprintln(os.Stderr, "building the images:", err)
		return 1
	}
	out, err := script("node.sh", "env")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	nodeEnv = parseEnv(out)
	// HARNESSFACTS_NODE_KEEP=1 is for working on these tests: a node that
	// is already running (make node-start) is used as it is and left
	// running, so that `go test -tags node -run ...` of one test does not
	// pay for a node's start and stop each time. make test-node never sets it.
	keep := os.Getenv("HARNESSFACTS_NODE_KEEP") == "1"
	if _, err := os.Stat(filepath.Join(nodeEnv["HARNESSFACTS_NODE_DIR"], "pids", "kubelet")); keep && err == nil {
		kubeconfig = nodeEnv["KUBECONFIG"]
		fmt.Fprintln(os.Stderr, "HARNESSFACTS_NODE_KEEP=1: using the running node; it stays running (make node-stop)")
	} else {
		if kubeconfig, err = script("node.sh", "start"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if !keep {
			defer func() {
				// Stop fails when it leaves anything behind on the host: a failed
				// stop fails the tests.
				if _, err := script("node.sh", "stop"); err != nil {
					fmt.Fprintln(os.Stderr, "hack/node.sh stop:", err)
					code = 1
				}
			}()
		}
	}
	kubectl = filepath.Join(nodeEnv["HARNESSFACTS_NODE_BIN"], "kubectl")
	ctr = filepath.Join(nodeEnv["HARNESSFACTS_NODE_BIN"], "ctr")
	if err := imgs.load(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "importing the images into containerd:", err)
		return 1
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = harnessv1.AddToScheme(scheme)
	_ = apiextensionsv1.AddToScheme(scheme)
	if k8s, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if keep {
		// Runs of an earlier session on this node would clash with the
		// tests' names (a run's spec cannot change).
		// With the release uninstalled no controller removes their
		// finalizers; nothing runs them any more either.
		// (A fresh node has no CRDs yet, and so no runs.)
		names, _ := kubectlErr("get", "harnessruns", "-n", "default", "-o", "name")
		for _, n := range strings.Fields(names) {
			_, _ = kubectlErr("patch", "-n", "default", n, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`)
		}
		if names != "" {
			if _, err := kubectlErr("delete", "harnessruns", "--all", "-n", "default", "--wait=true"); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	return m.Run()
}

// script runs hack/NAME and returns its stdout, trimmed; its stderr goes to
// ours, so a slow build says what it does.
func script(name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", name), args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/%s %s: %w", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

func parseEnv(s string) map[string]string {
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if ok {
			env[k] = v
		}
	}
	return env
}

// run runs a command and returns its stdout; the error carries its output.
func runCmd(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(name), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// k runs kubectl against the node's cluster.
func k(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlErr(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func kubectlErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return runCmd(ctx, kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
}

// eventually polls cond every second until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last: %s", what, timeout, last)
		}
		time.Sleep(time.Second)
	}
}

func repoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}
