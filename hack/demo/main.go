//go:build !windows

// Command demo is the first thing a new user runs (`make demo`): it starts the
// control plane built by hack/control-plane.sh, installs the CRDs, applies the
// sample HarnessRun with the built kubectl and shows what the API server made
// of it, then shows an invalid run being refused. It stops everything before
// it exits.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/harnessfacts/harnessfacts/internal/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run() error {
	fmt.Println("==> starting kube-apiserver and etcd, installing the HarnessFacts CRDs")
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("==> stopping the control plane")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: stopping the control plane:", err)
		}
	}()

	dir, err := os.MkdirTemp("", "harnessfacts-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		return err
	}
	samples := filepath.Join(testenv.RepoRoot(), "config", "samples")
	kubectl := func(args ...string) error {
		fmt.Printf("\n$ kubectl %s\n", strings.Join(args, " "))
		cmd := exec.Command(filepath.Join(env.Assets, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stdout
		return cmd.Run()
	}

	steps := [][]string{
		{"apply", "-f", filepath.Join(samples, "harnessrun_exec.yaml")},
		{"get", "harnessruns", "-n", "default"},
		{"get", "harnessrun", "hello-exec", "-n", "default", "-o", "jsonpath={.spec.limits}{\"\\n\"}{.spec.isolation}{\"\\n\"}{.spec.network}{\"\\n\"}"},
	}
	for _, s := range steps {
		if err := kubectl(s...); err != nil {
			return fmt.Errorf("kubectl %s: %w", strings.Join(s, " "), err)
		}
	}
	// The invalid sample must be refused; its messages are the point.
	if err := kubectl("apply", "-f", filepath.Join(samples, "harnessrun_invalid.yaml")); err == nil {
		return fmt.Errorf("the API server accepted config/samples/harnessrun_invalid.yaml")
	}
	fmt.Println("\n(refused, as it should be)")
	return nil
}
