//go:build !windows

// controller-runtime's envtest does not build for Windows; the control plane
// the tests run against is Linux-only here anyway.

// Package testenv starts the real control plane the tests run against: the
// kube-apiserver and etcd that hack/control-plane.sh builds, through
// controller-runtime's envtest, with the generated CRDs installed.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	harnessv1 "github.com/harnessfacts/harnessfacts/api/v1alpha1"
)

// Env is a running control plane.
type Env struct {
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Scheme knows the built-in types and the harnessfacts.io types.
	Scheme *runtime.Scheme
	// Assets is the directory holding kube-apiserver, etcd and kubectl.
	Assets string

	env *envtest.Environment
}

// RepoRoot is the root of this repository, found from this file's path.
func RepoRoot() string {
	_, file, _, _ := goruntime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// Start starts etcd and kube-apiserver from KUBEBUILDER_ASSETS and installs
// the CRDs of config/crd/bases. It fails, rather than skips, when the
// binaries are missing: run the tests with `make test`, which builds them.
func Start() (*Env, error) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run the tests with `make test`, or export KUBEBUILDER_ASSETS=$(hack/control-plane.sh)")
	}
	for _, bin := range []string{"kube-apiserver", "etcd", "kubectl"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("KUBEBUILDER_ASSETS=%s has no %s: run hack/control-plane.sh: %w", assets, bin, err)
		}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := harnessv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		Scheme:                scheme,
	}
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves the control plane it started running when a
		// later step fails (a CRD the API server refuses): stopped here,
		// or every such failure left a kube-apiserver and an etcd behind.
		_ = env.Stop()
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	return &Env{Config: cfg, Scheme: scheme, Assets: assets, env: env}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.env.Stop() }

// Kubeconfig writes a kubeconfig for this control plane to path, for
// commands such as kubectl.
func (e *Env) Kubeconfig(path string) error {
	user, err := e.env.ControlPlane.AddUser(envtest.User{Name: "testenv-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return err
	}
	data, err := user.KubeConfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o600)
}
