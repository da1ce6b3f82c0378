// Package install tests the install surface the way an operator meets it:
// the Helm chart rendered with the values they would set, `helm lint`, the
// kustomize output of config/default, and every object of both applied with
// `kubectl apply --dry-run=server` to a real kube-apiserver (the one
// internal/testing/testenv starts, with the CRDs installed). The node-agent's
// admission policy is installed for real and exercised as the node-agents'
// service account of two different nodes.
//
// Run: KUBEBUILDER_ASSETS=$(hack/control-plane.sh) go test ./test/install/...
// Helm is built once into the cache by hack/helm.sh (the test calls it).
package install

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/harnessfacts/harnessfacts/internal/testing/testenv"
)

var (
	env        *testenv.Env
	k8s        client.Client
	helm       string // the helm binary hack/helm.sh built or reused
	kubectl    string // the kubectl built with the control plane
	kubeconfig string // admin kubeconfig of the control plane
	root       = testenv.RepoRoot()
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// The clients log nothing worth reading here; without a logger
	// controller-runtime prints a warning with a stack trace.
	ctrllog.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	var err error
	helm, err = buildHelm()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env, err = testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the control plane:", err)
		}
	}()
	kubectl = filepath.Join(env.Assets, "kubectl")
	dir, err := os.MkdirTemp("", "harnessfacts-install-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, "writing a kubeconfig:", err)
		return 1
	}
	k8s, err = client.New(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// buildHelm runs hack/helm.sh, which builds the pinned Helm into the cache on
// first use and prints its path.
func buildHelm() (string, error) {
	cmd := exec.Command(filepath.Join(root, "hack", "helm.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/helm.sh could not build or find helm (it builds helm from the Go module proxy into the cache): %w", err)
	}
	path := strings.TrimSpace(string(out))
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("hack/helm.sh printed %q, which is not a file: %w", path, err)
	}
	return path, nil
}

// runCmd runs a command and returns its stdout; on failure the error holds
// stderr, which is what the user would read.
func runCmd(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// runKubectl runs the built kubectl against the control plane.
func runKubectl(stdin string, args ...string) (string, error) {
	cmd := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}
